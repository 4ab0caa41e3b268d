// out = %conv2d_9_nhwc (f32)
// in0 = %conv2d_8_3_nhwc (f32)
// in1 = %features.5.0.block.0.weight_taps (f32)
// one thread per output element
template <typename I>
__device__ __forceinline__ void dlcb_k42_conv2d_9_nhwc_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const I numel) {
  const I step = (I)gridDim.x * blockDim.x;
  for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < numel; t += step) {
    double acc1 = 0.0;
    const I i2 = t / 5376;  // _t // 5376
    const I i3 = i2 % 14;  // (_t // 5376) % 14
    const I i5 = t / 384;  // _t // 384
    const I i6 = i5 % 14;  // (_t // 384) % 14
    const I i9 = t / 75264;  // _t // 75264
    const I i10 = t % 384;  // _t % 384
    for (I l0 = 0; l0 < 7; ++l0) {
      for (I l1 = 0; l1 < 7; ++l1) {
        const I i4 = l0 + i3 - 3;  // _l0 + ((_t // 5376) % 14) - 3
        const I i7 = l1 + i6 - 3;  // _l1 + ((_t // 384) % 14) - 3
        const bool m8 = 0 <= i4 && 0 <= i7 && i4 < 14 && i7 < 14;
        const I i11 = 5376 * l0 + 384 * l1 + 75264 * i9 + i10 + 384 * i6 + 5376 * i3 - 17280;  // 5376*_l0 + 384*_l1 + 75264*(_t // 75264) + (_t % 384) + 384*((_t // 384) % 14) + 5376*((_t // 5376) % 14) - 17280
        const float x12 = (m8 ? in0[i11] : 0.0f);
        const float v13 = (m8 ? x12 : 0.0f);
        const I i14 = 2688 * l0 + 384 * l1 + i10;  // 2688*_l0 + 384*_l1 + (_t % 384)
        const float x15 = in1[i14];
        const float v16 = (v13 * x15);
        acc1 += v16;
      }
    }
    const float v17 = ((float)(acc1));
    out[t] = v17;
  }
}
extern "C" __global__ void dlcb_k42_conv2d_9_nhwc(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel) {
  dlcb_k42_conv2d_9_nhwc_body<long long>(out, in0, in1, numel);
}
extern "C" __global__ void dlcb_k42_conv2d_9_nhwc_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel) {
  dlcb_k42_conv2d_9_nhwc_body<int>(out, in0, in1, (int)numel);
}

// out = %conv2d_9_nhwc (f32)
// in0 = %conv2d_8_3_nhwc (f32)
// in1 = %features.5.0.block.0.weight_taps (f32)
// one group of threads per output element (G > 0: G lanes of a warp, else the block); the group's threads split the reduction
template <typename I, unsigned G>
__device__ __forceinline__ void dlcb_k42_conv2d_9_nhwc_blk_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const I numel) {
  constexpr unsigned L = G ? G : 1;   // a group's lanes in one warp
  const unsigned lane = G ? threadIdx.x % L : threadIdx.x;
  const unsigned gsize = G ? G : blockDim.x;   // threads per group
  const I per = G ? (I)(blockDim.x / L) : (I)1;   // outputs per block
  for (I t = (I)blockIdx.x * per + (G ? (I)(threadIdx.x / L) : (I)0); t < numel; t += (I)gridDim.x * per) {
    double acc1 = 0.0;
    const I i3 = t / 5376;  // _t // 5376
    const I i4 = i3 % 14;  // (_t // 5376) % 14
    const I i7 = t / 384;  // _t // 384
    const I i8 = i7 % 14;  // (_t // 384) % 14
    const I i11 = t / 75264;  // _t // 75264
    const I i12 = t % 384;  // _t % 384
    #pragma unroll 4
    for (I lf = lane; lf < 49; lf += gsize) {
      const I i2 = lf / 7;  // _lf // 7
      const I i5 = i2 + i4 - 3;  // (_lf // 7) + ((_t // 5376) % 14) - 3
      const I i6 = lf % 7;  // _lf % 7
      const I i9 = i6 + i8 - 3;  // (_lf % 7) + ((_t // 384) % 14) - 3
      const bool m10 = 0 <= i5 && 0 <= i9 && i5 < 14 && i9 < 14;
      const I i13 = 384 * lf + 2688 * i2 + 75264 * i11 + i12 + 384 * i8 + 5376 * i4 - 17280;  // 384*_lf + 2688*(_lf // 7) + 75264*(_t // 75264) + (_t % 384) + 384*((_t // 384) % 14) + 5376*((_t // 5376) % 14) - 17280
      const float x14 = (m10 ? in0[i13] : 0.0f);
      const float v15 = (m10 ? x14 : 0.0f);
      const I i16 = 384 * lf + i12;  // 384*_lf + (_t % 384)
      const float x17 = in1[i16];
      const float v18 = (v15 * x17);
      acc1 += v18;
    }
    acc1 = dlcb_group_reduce<G, double>(acc1, (double)0.0, dlcb_sum_op());
    const float v19 = ((float)(acc1));
    if (lane == 0) out[t] = v19;
  }
}
extern "C" __global__ void dlcb_k42_conv2d_9_nhwc_blk(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel) {
  dlcb_k42_conv2d_9_nhwc_blk_body<long long, 0>(out, in0, in1, numel);
}
extern "C" __global__ void dlcb_k42_conv2d_9_nhwc_blk_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel) {
  dlcb_k42_conv2d_9_nhwc_blk_body<int, 0>(out, in0, in1, (int)numel);
}
