#include "core/build_info.h"

#include "tierserve_build_info.h"  // generated: cmake/BuildInfo.cmake

namespace ts {

const char* build_version() { return TIERSERVE_VERSION; }
const char* build_git_revision() { return TIERSERVE_GIT_REVISION; }
const char* build_compiler() { return TIERSERVE_COMPILER; }

}  // namespace ts
