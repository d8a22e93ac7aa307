// What this binary is: version, git revision (with -dirty for uncommitted changes), and
// compiler, for `tierserve --version`, the start-up log and tierserve_build_info.
#pragma once

#include <string>

namespace ts {

const char* build_version();
const char* build_git_revision();
const char* build_compiler();

}  // namespace ts
