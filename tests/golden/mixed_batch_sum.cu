// N = N
// one thread per output element
extern "C" __global__ void dlcb_k0_sum_1(float* __restrict__ out, const float* __restrict__ in_x, const float* __restrict__ in_y, long long numel, long long N) {
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < numel; t += step) {
    const long long c0 = t;  // t
    double acc1 = 0.0;
    const long long i4 = c0 / 6;  // c0 // 6
    const float x5 = in_y[i4];
    for (long long r0 = 0; r0 < N; ++r0) {
      const long long i2 = c0 + 24LL * r0;  // c0 + 24*r0
      const float x3 = in_x[i2];
      const float v6 = (x3 * x5);
      const float v7 = (v6 < 0.0f ? 0.0f : v6);
      acc1 += v7;
    }
    const float v8 = (float)(acc1);
    out[t] = v8;
  }
}
