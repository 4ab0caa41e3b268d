// out = %adaptive_avg_pool2d (f32)
// in0 = %features.7.2.layer_scale (f32)
// in1 = %linear_35 (f32)
// in2 = %features.7.2.block.5.bias (f32)
// in3 = %add__16_nhwc (f32)
// one thread per output element
template <typename I>
__device__ __forceinline__ void dlcb_k115_adaptive_avg_pool2d_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, const I numel) {
  const I step = (I)gridDim.x * blockDim.x;
  for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < numel; t += step) {
    double acc1 = 0.0;
    const I i2 = t % 768;  // _t % 768
    const float x3 = in0[i2];
    const I i4 = t / 768;  // _t // 768
    const float x7 = in2[i2];
    for (I l0 = 0; l0 < 7; ++l0) {
      for (I l1 = 0; l1 < 7; ++l1) {
        const I i5 = 5376 * l0 + 768 * l1 + t + 36864 * i4;  // 5376*_l0 + 768*_l1 + _t + 36864*(_t // 768)
        const float x6 = in1[i5];
        const float v8 = (x6 + x7);
        const float v9 = (x3 * v8);
        const float x10 = in3[i5];
        const float v11 = (v9 + x10);
        acc1 += v11;
      }
    }
    const float v12 = ((float)(acc1 / (double)49));
    out[t] = v12;
  }
}
extern "C" __global__ void dlcb_k115_adaptive_avg_pool2d(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, long long numel) {
  dlcb_k115_adaptive_avg_pool2d_body<long long>(out, in0, in1, in2, in3, numel);
}
extern "C" __global__ void dlcb_k115_adaptive_avg_pool2d_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, long long numel) {
  dlcb_k115_adaptive_avg_pool2d_body<int>(out, in0, in1, in2, in3, (int)numel);
}

// out = %adaptive_avg_pool2d (f32)
// in0 = %features.7.2.layer_scale (f32)
// in1 = %linear_35 (f32)
// in2 = %features.7.2.block.5.bias (f32)
// in3 = %add__16_nhwc (f32)
// one group of threads per output element (G > 0: G lanes of a warp, else the block); the group's threads split the reduction
template <typename I, unsigned G>
__device__ __forceinline__ void dlcb_k115_adaptive_avg_pool2d_blk_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, const I numel) {
  constexpr unsigned L = G ? G : 1;   // a group's lanes in one warp
  const unsigned lane = G ? threadIdx.x % L : threadIdx.x;
  const unsigned gsize = G ? G : blockDim.x;   // threads per group
  const I per = G ? (I)(blockDim.x / L) : (I)1;   // outputs per block
  for (I t = (I)blockIdx.x * per + (G ? (I)(threadIdx.x / L) : (I)0); t < numel; t += (I)gridDim.x * per) {
    double acc1 = 0.0;
    const I i2 = t % 768;  // _t % 768
    const float x3 = in0[i2];
    const I i4 = t / 768;  // _t // 768
    const float x7 = in2[i2];
    #pragma unroll 4
    for (I lf = lane; lf < 49; lf += gsize) {
      const I i5 = 768 * lf + t + 36864 * i4;  // 768*_lf + _t + 36864*(_t // 768)
      const float x6 = in1[i5];
      const float v8 = (x6 + x7);
      const float v9 = (x3 * v8);
      const float x10 = in3[i5];
      const float v11 = (v9 + x10);
      acc1 += v11;
    }
    acc1 = dlcb_group_reduce<G, double>(acc1, (double)0.0, dlcb_sum_op());
    const float v12 = ((float)(acc1 / (double)49));
    if (lane == 0) out[t] = v12;
  }
}
extern "C" __global__ void dlcb_k115_adaptive_avg_pool2d_blk(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, long long numel) {
  dlcb_k115_adaptive_avg_pool2d_blk_body<long long, 0>(out, in0, in1, in2, in3, numel);
}
extern "C" __global__ void dlcb_k115_adaptive_avg_pool2d_blk_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, long long numel) {
  dlcb_k115_adaptive_avg_pool2d_blk_body<int, 0>(out, in0, in1, in2, in3, (int)numel);
}
