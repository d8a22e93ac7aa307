// What the long-running commands (serve, gateway) share: systemd's readiness protocol and
// the port file a supervisor reads.
#pragma once

#include <csignal>
#include <string>

namespace ts::tools {

// sd_notify(3) without libsystemd: one datagram to the unix socket named by $NOTIFY_SOCKET
// (a path, or an abstract name starting with '@'). Nothing when the variable is unset.
void sd_notify_state(const std::string& state);
// Writes "PORT\n" to path atomically (a temporary file renamed); false on failure.
bool write_port_file(const std::string& path, int port);

// SIGTERM and SIGINT blocked in this thread and every thread it starts afterwards (they
// inherit the mask), to be taken synchronously with wait_for_stop_signal; SIGPIPE ignored
// (a peer that closed its socket must not kill the process). Call before starting threads.
sigset_t block_stop_signals();
// Waits for SIGTERM or SIGINT; returns which.
int wait_for_stop_signal(const sigset_t& sigs);

}  // namespace ts::tools
