// What the long-running commands (serve, gateway) share: systemd's readiness protocol and
// the port file a supervisor reads.
#pragma once

#include <string>

namespace ts::tools {

// sd_notify(3) without libsystemd: one datagram to the unix socket named by $NOTIFY_SOCKET
// (a path, or an abstract name starting with '@'). Nothing when the variable is unset.
void sd_notify_state(const std::string& state);
// Writes "PORT\n" to path atomically (a temporary file renamed); false on failure.
bool write_port_file(const std::string& path, int port);

}  // namespace ts::tools
