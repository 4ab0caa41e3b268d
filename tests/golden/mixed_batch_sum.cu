// N = N
// one thread per output element
template <typename I>
__device__ __forceinline__ void dlcb_k0_sum_1_body(float* __restrict__ out, const float* __restrict__ in_x, const float* __restrict__ in_y, const I numel, const I N) {
  const I step = (I)gridDim.x * blockDim.x;
  for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < numel; t += step) {
    double acc1 = 0.0;
    const I i4 = t / 6;  // t // 6
    const float x5 = in_y[i4];
    for (I r0 = 0; r0 < N; ++r0) {
      const I i2 = 24 * r0 + t;  // 24*r0 + t
      const float x3 = in_x[i2];
      const float v6 = (x3 * x5);
      const float v7 = (v6 < 0.0f ? 0.0f : v6);
      acc1 += v7;
    }
    const float v8 = (float)(acc1);
    out[t] = v8;
  }
}
extern "C" __global__ void dlcb_k0_sum_1(float* __restrict__ out, const float* __restrict__ in_x, const float* __restrict__ in_y, long long numel, long long N) {
  dlcb_k0_sum_1_body<long long>(out, in_x, in_y, numel, N);
}
extern "C" __global__ void dlcb_k0_sum_1_i32(float* __restrict__ out, const float* __restrict__ in_x, const float* __restrict__ in_y, long long numel, long long N) {
  dlcb_k0_sum_1_body<int>(out, in_x, in_y, (int)numel, (int)N);
}
