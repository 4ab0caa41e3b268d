// out = %adaptive_avg_pool2d (f32)
// in0 = %features.7.2.layer_scale (f32)
// in1 = %linear_35 (f32)
// in2 = %features.7.2.block.5.bias (f32)
// in3 = %add__16_nhwc (f32)
// p0 = (((x_2 // 4) // 2) // 2) // 2
// p1 = (((x_3 // 4) // 2) // 2) // 2
// p2 = ((((x_2 // 4) // 2) // 2) // 2)*((((x_3 // 4) // 2) // 2) // 2)
// one thread per output element
template <typename I>
__device__ __forceinline__ void dlcb_k115_adaptive_avg_pool2d_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, const I numel, const I p0, const I p1, const I p2) {
  const I step = (I)gridDim.x * blockDim.x;
  for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < numel; t += step) {
    double acc1 = 0.0;
    const I i2 = t % 768;  // _t % 768
    const float x3 = in0[i2];
    const I i4 = t / 768;  // _t // 768
    const I i5 = i4 * p0 * p1;  // (_t // 768)*((((x_2 // 4) // 2) // 2) // 2)*((((x_3 // 4) // 2) // 2) // 2)
    const float x8 = in2[i2];
    for (I lf = 0; lf < p2; ++lf) {
      const I i6 = 768 * lf + 768 * i5 + i2;  // 768*_lf + 768*(_t // 768)*((((x_2 // 4) // 2) // 2) // 2)*((((x_3 // 4) // 2) // 2) // 2) + (_t % 768)
      const float x7 = in1[i6];
      const float v9 = (x7 + x8);
      const float v10 = (x3 * v9);
      const float x11 = in3[i6];
      const float v12 = (v10 + x11);
      acc1 += v12;
    }
    const float v13 = ((float)(acc1 / (double)p2));
    out[t] = v13;
  }
}
extern "C" __global__ void dlcb_k115_adaptive_avg_pool2d(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, long long numel, long long p0, long long p1, long long p2) {
  dlcb_k115_adaptive_avg_pool2d_body<long long>(out, in0, in1, in2, in3, numel, p0, p1, p2);
}
extern "C" __global__ void dlcb_k115_adaptive_avg_pool2d_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, long long numel, long long p0, long long p1, long long p2) {
  dlcb_k115_adaptive_avg_pool2d_body<int>(out, in0, in1, in2, in3, (int)numel, (int)p0, (int)p1, (int)p2);
}

// out = %adaptive_avg_pool2d (f32)
// in0 = %features.7.2.layer_scale (f32)
// in1 = %linear_35 (f32)
// in2 = %features.7.2.block.5.bias (f32)
// in3 = %add__16_nhwc (f32)
// p0 = (((x_2 // 4) // 2) // 2) // 2
// p1 = (((x_3 // 4) // 2) // 2) // 2
// p2 = ((((x_2 // 4) // 2) // 2) // 2)*((((x_3 // 4) // 2) // 2) // 2)
// one group of threads per output element (G > 0: G lanes of a warp, else the block); the group's threads split the reduction
template <typename I, unsigned G>
__device__ __forceinline__ void dlcb_k115_adaptive_avg_pool2d_blk_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, const I numel, const I p0, const I p1, const I p2) {
  constexpr unsigned L = G ? G : 1;   // a group's lanes in one warp
  const unsigned lane = G ? threadIdx.x % L : threadIdx.x;
  const unsigned gsize = G ? G : blockDim.x;   // threads per group
  const I per = G ? (I)(blockDim.x / L) : (I)1;   // outputs per block
  for (I t = (I)blockIdx.x * per + (G ? (I)(threadIdx.x / L) : (I)0); t < numel; t += (I)gridDim.x * per) {
    double acc1 = 0.0;
    const I i2 = t % 768;  // _t % 768
    const float x3 = in0[i2];
    const I i4 = t / 768;  // _t // 768
    const I i5 = i4 * p0 * p1;  // (_t // 768)*((((x_2 // 4) // 2) // 2) // 2)*((((x_3 // 4) // 2) // 2) // 2)
    const float x8 = in2[i2];
    #pragma unroll 4
    for (I lf = lane; lf < p2; lf += gsize) {
      const I i6 = 768 * lf + 768 * i5 + i2;  // 768*_lf + 768*(_t // 768)*((((x_2 // 4) // 2) // 2) // 2)*((((x_3 // 4) // 2) // 2) // 2) + (_t % 768)
      const float x7 = in1[i6];
      const float v9 = (x7 + x8);
      const float v10 = (x3 * v9);
      const float x11 = in3[i6];
      const float v12 = (v10 + x11);
      acc1 += v12;
    }
    acc1 = dlcb_group_reduce<G, double>(acc1, (double)0.0, dlcb_sum_op());
    const float v13 = ((float)(acc1 / (double)p2));
    if (lane == 0) out[t] = v13;
  }
}
extern "C" __global__ void dlcb_k115_adaptive_avg_pool2d_blk(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, long long numel, long long p0, long long p1, long long p2) {
  dlcb_k115_adaptive_avg_pool2d_blk_body<long long, 0>(out, in0, in1, in2, in3, numel, p0, p1, p2);
}
extern "C" __global__ void dlcb_k115_adaptive_avg_pool2d_blk_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, const float* __restrict__ in3, long long numel, long long p0, long long p1, long long p2) {
  dlcb_k115_adaptive_avg_pool2d_blk_body<int, 0>(out, in0, in1, in2, in3, (int)numel, (int)p0, (int)p1, (int)p2);
}
