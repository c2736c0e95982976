#include "daemon/sluicectl/interrupt.hpp"

namespace sluice::ctl {

volatile std::sig_atomic_t g_interrupted = 0;
volatile std::sig_atomic_t g_signal = 0;

namespace {
void on_signal(int sig) {
  g_signal = sig;
  g_interrupted = 1;
}
}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace sluice::ctl
