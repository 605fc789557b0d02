// kernelkit benchmark helpers (python/kernelkit/bench.py).
//
// kk_hold_stream keeps its stream busy until the host sets flag[0]: the harness queues the calls it times behind
// it, so their CUDA events measure the GPU's work back to back, not the pace at which the host issues it (as
// nvbench's blocking kernel does). flag points to pinned host memory, which the GPU reads through unified
// addressing. After timeout_ns it gives up and sets flag[1]: a call that waited on the GPU while it was held
// (a host sync) would otherwise wait forever, and the host learns that the queued times are not the GPU's alone.

__global__ void kk_hold_stream(unsigned long long flag_address, unsigned long long timeout_ns) {
  volatile int* flag = reinterpret_cast<volatile int*>(flag_address);
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (flag[0] == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) {
      flag[1] = 1;
      return;
    }
    __nanosleep(500);  // each poll is a read over PCIe
  }
}
