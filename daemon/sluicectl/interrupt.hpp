#pragma once
// Ctrl-C for the commands that wait (watch, trace): SIGINT/SIGTERM set a flag and interrupt poll() (no
// SA_RESTART on purpose), so the transport returns early and the command cleans up before it exits.
#include <csignal>

namespace sluice::ctl {

extern volatile std::sig_atomic_t g_interrupted;
extern volatile std::sig_atomic_t g_signal;  // the signal that set g_interrupted

void install_interrupt_handlers();

}  // namespace sluice::ctl
