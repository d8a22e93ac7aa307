// Child processes for the black-box tests: start the real binary with its stdout and
// stderr in files, wait for it, read what it wrote.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ts::testing_proc {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

using Env = std::vector<std::pair<std::string, std::string>>;

// Starts argv[0] (a path) with argv, stdout into out_path and stderr into err_path, env
// added to this process's environment. Returns the child's pid.
inline pid_t spawn(const std::vector<std::string>& argv, const std::string& out_path, const std::string& err_path,
                   const Env& env = {}) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fo = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int fe = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0) _exit(127);
    ::dup2(fo, 1);
    ::dup2(fe, 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::string> a = argv;
    std::vector<char*> args;
    for (auto& s : a) args.push_back(s.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

struct Proc {
  bool signaled = false;
  int code = -1;  // exit status when !signaled, else the signal
  std::string out, err;
};

// Runs argv to completion; its output is kept in out_path / err_path and returned.
inline Proc run_captured(const std::vector<std::string>& argv, const std::string& out_path,
                         const std::string& err_path, const Env& env = {}) {
  const pid_t pid = spawn(argv, out_path, err_path, env);
  int status = 0;
  ::waitpid(pid, &status, 0);
  Proc p;
  p.signaled = WIFSIGNALED(status);
  p.code = p.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
  p.out = slurp(out_path);
  p.err = slurp(err_path);
  return p;
}

}  // namespace ts::testing_proc
