// out = %conv2d_9_nhwc (f32)
// in0 = %conv2d_8_3_nhwc (f32)
// in1 = %features.5.0.block.0.weight_taps (f32)
// p0 = 384*(((x_3 // 4) // 2) // 2)
// p1 = ((x_2 // 4) // 2) // 2
// p2 = ((x_3 // 4) // 2) // 2
// dv0 = magic(384*(((x_3 // 4) // 2) // 2))
// dv1 = magic(((x_2 // 4) // 2) // 2)
// dv2 = magic(((x_3 // 4) // 2) // 2)
// one thread per output element
template <typename I>
__device__ __forceinline__ void dlcb_k42_conv2d_9_nhwc_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const I numel, const I p0, const I p1, const I p2, const long long dv0, const long long dv1, const long long dv2) {
  const I step = (I)gridDim.x * blockDim.x;
  for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < numel; t += step) {
    double acc1 = 0.0;
    const I i2 = dlcb_udiv<I>(t, p0, dv0);  // _t // (384*(((x_3 // 4) // 2) // 2))
    const I i3 = dlcb_umod<I>(i2, p1, dv1);  // (_t // (384*(((x_3 // 4) // 2) // 2))) % (((x_2 // 4) // 2) // 2)
    const I i5 = t / 384;  // _t // 384
    const I i6 = dlcb_umod<I>(i5, p2, dv2);  // (_t // 384) % (((x_3 // 4) // 2) // 2)
    const I i13 = t % 384;  // _t % 384
    for (I l0 = 0; l0 < 7; ++l0) {
      float l1v[7];
      #pragma unroll
      for (I l1 = 0; l1 < 7; ++l1) {
        const I i4 = l0 + i3 - 3;  // _l0 + ((_t // (384*(((x_3 // 4) // 2) // 2))) % (((x_2 // 4) // 2) // 2)) - 3
        const I i7 = l1 + i6 - 3;  // _l1 + ((_t // 384) % (((x_3 // 4) // 2) // 2)) - 3
        const bool m8 = 0 <= i4 && 0 <= i7 && i4 < p1 && i7 < p2;
        const I i9 = l0 * p2;  // _l0*(((x_3 // 4) // 2) // 2)
        const I i10 = 384 * l1 + t + 384 * i9 + (-1152) * p2 - 1152;  // 384*_l1 + _t + 384*_l0*(((x_3 // 4) // 2) // 2) - 1152*(((x_3 // 4) // 2) // 2) - 1152
        const float x11 = (m8 ? in0[i10] : 0.0f);
        const float v12 = (m8 ? x11 : 0.0f);
        const I i14 = 2688 * l0 + 384 * l1 + i13;  // 2688*_l0 + 384*_l1 + (_t % 384)
        const float x15 = in1[i14];
        const float v16 = (v12 * x15);
        l1v[l1] = v16;
      }
      #pragma unroll
      for (I l1 = 0; l1 < 7; ++l1) {
        acc1 += l1v[l1];
      }
    }
    const float v17 = ((float)(acc1));
    out[t] = v17;
  }
}
extern "C" __global__ void dlcb_k42_conv2d_9_nhwc(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel, long long p0, long long p1, long long p2, long long dv0, long long dv1, long long dv2) {
  dlcb_k42_conv2d_9_nhwc_body<long long>(out, in0, in1, numel, p0, p1, p2, dv0, dv1, dv2);
}
extern "C" __global__ void dlcb_k42_conv2d_9_nhwc_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel, long long p0, long long p1, long long p2, long long dv0, long long dv1, long long dv2) {
  dlcb_k42_conv2d_9_nhwc_body<int>(out, in0, in1, (int)numel, (int)p0, (int)p1, (int)p2, dv0, dv1, dv2);
}

// out = %conv2d_9_nhwc (f32)
// in0 = %conv2d_8_3_nhwc (f32)
// in1 = %features.5.0.block.0.weight_taps (f32)
// p0 = 384*(((x_3 // 4) // 2) // 2)
// p1 = ((x_2 // 4) // 2) // 2
// p2 = ((x_3 // 4) // 2) // 2
// dv0 = magic(384*(((x_3 // 4) // 2) // 2))
// dv1 = magic(((x_2 // 4) // 2) // 2)
// dv2 = magic(((x_3 // 4) // 2) // 2)
// one group of threads per output element (G > 0: G lanes of a warp, else the block); the group's threads split the reduction
template <typename I, unsigned G>
__device__ __forceinline__ void dlcb_k42_conv2d_9_nhwc_blk_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const I numel, const I p0, const I p1, const I p2, const long long dv0, const long long dv1, const long long dv2) {
  constexpr unsigned L = G ? G : 1;   // a group's lanes in one warp
  const unsigned lane = G ? threadIdx.x % L : threadIdx.x;
  const unsigned gsize = G ? G : blockDim.x;   // threads per group
  const I per = G ? (I)(blockDim.x / L) : (I)1;   // outputs per block
  for (I t = (I)blockIdx.x * per + (G ? (I)(threadIdx.x / L) : (I)0); t < numel; t += (I)gridDim.x * per) {
    double acc1 = 0.0;
    const I i3 = dlcb_udiv<I>(t, p0, dv0);  // _t // (384*(((x_3 // 4) // 2) // 2))
    const I i4 = dlcb_umod<I>(i3, p1, dv1);  // (_t // (384*(((x_3 // 4) // 2) // 2))) % (((x_2 // 4) // 2) // 2)
    const I i7 = t / 384;  // _t // 384
    const I i8 = dlcb_umod<I>(i7, p2, dv2);  // (_t // 384) % (((x_3 // 4) // 2) // 2)
    const I i15 = t % 384;  // _t % 384
    #pragma unroll 4
    for (I lf = lane; lf < 49; lf += gsize) {
      const I i2 = lf / 7;  // _lf // 7
      const I i5 = i2 + i4 - 3;  // (_lf // 7) + ((_t // (384*(((x_3 // 4) // 2) // 2))) % (((x_2 // 4) // 2) // 2)) - 3
      const I i6 = lf % 7;  // _lf % 7
      const I i9 = i6 + i8 - 3;  // (_lf % 7) + ((_t // 384) % (((x_3 // 4) // 2) // 2)) - 3
      const bool m10 = 0 <= i5 && 0 <= i9 && i5 < p1 && i9 < p2;
      const I i11 = i2 * p2;  // (_lf // 7)*(((x_3 // 4) // 2) // 2)
      const I i12 = t + 384 * i11 + (-1152) * p2 + 384 * i6 - 1152;  // _t + 384*(_lf // 7)*(((x_3 // 4) // 2) // 2) - 1152*(((x_3 // 4) // 2) // 2) + 384*(_lf % 7) - 1152
      const float x13 = (m10 ? in0[i12] : 0.0f);
      const float v14 = (m10 ? x13 : 0.0f);
      const I i16 = 384 * lf + i15;  // 384*_lf + (_t % 384)
      const float x17 = in1[i16];
      const float v18 = (v14 * x17);
      acc1 += v18;
    }
    acc1 = dlcb_group_reduce<G, double>(acc1, (double)0.0, dlcb_sum_op());
    const float v19 = ((float)(acc1));
    if (lane == 0) out[t] = v19;
  }
}
extern "C" __global__ void dlcb_k42_conv2d_9_nhwc_blk(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel, long long p0, long long p1, long long p2, long long dv0, long long dv1, long long dv2) {
  dlcb_k42_conv2d_9_nhwc_blk_body<long long, 0>(out, in0, in1, numel, p0, p1, p2, dv0, dv1, dv2);
}
extern "C" __global__ void dlcb_k42_conv2d_9_nhwc_blk_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel, long long p0, long long p1, long long p2, long long dv0, long long dv1, long long dv2) {
  dlcb_k42_conv2d_9_nhwc_blk_body<int, 0>(out, in0, in1, (int)numel, (int)p0, (int)p1, (int)p2, dv0, dv1, dv2);
}
