// out = %sum_1 (f32)
// in0 = %x (f32)
// in1 = %y (f32)
// d_N = N
// one thread per output element
template <typename I>
__device__ __forceinline__ void dlcb_k0_sum_1_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const I numel, const I d_N) {
  const I step = (I)gridDim.x * blockDim.x;
  for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < numel; t += step) {
    double acc1 = 0.0;
    const I i4 = t / 6;  // _t // 6
    const float x5 = in1[i4];
    for (I l0 = 0; l0 < d_N; ++l0) {
      const I i2 = 24 * l0 + t;  // 24*_l0 + _t
      const float x3 = in0[i2];
      const float v6 = (x3 * x5);
      const float v7 = (v6 < 0.0f ? 0.0f : v6);
      acc1 += v7;
    }
    const float v8 = ((float)(acc1));
    out[t] = v8;
  }
}
extern "C" __global__ void dlcb_k0_sum_1(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel, long long d_N) {
  dlcb_k0_sum_1_body<long long>(out, in0, in1, numel, d_N);
}
extern "C" __global__ void dlcb_k0_sum_1_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel, long long d_N) {
  dlcb_k0_sum_1_body<int>(out, in0, in1, (int)numel, (int)d_N);
}
