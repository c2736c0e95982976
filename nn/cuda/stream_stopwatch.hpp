#pragma once
// Times work enqueued on a stream between two timing events (the runtime's RAII events: freed on every way out,
// exceptions included). For measuring, not for the data path: it waits for the work on the host.
#include <cuda_runtime.h>

#include "runtime/gpu_handles.hpp"

namespace sluice::nn::cuda {

class StreamStopwatch {
 public:
  StreamStopwatch() : start_(Event::create(true)), stop_(Event::create(true)) {}
  // Enqueues `work` on `stream` between the two events, waits for it, returns its GPU time in ms.
  template <typename Work>
  float time_ms(cudaStream_t stream, Work&& work) {
    gpu::event_record(start_.get(), stream);
    work();
    gpu::event_record(stop_.get(), stream);
    gpu::event_synchronize(stop_.get());
    return gpu::event_elapsed_ms(start_.get(), stop_.get());
  }

 private:
  Event start_, stop_;
};

}  // namespace sluice::nn::cuda
