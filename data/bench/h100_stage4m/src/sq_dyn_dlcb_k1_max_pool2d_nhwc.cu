// out = %max_pool2d_nhwc (f32)
// in0 = %conv2d_nhwc (f32)
// in1 = %conv2d_2 (f32)
// p0 = 64*((((x_3 + 1) // 2) + 1) // 2) - 64
// p1 = ((((x_2 + 1) // 2) + 1) // 2) - 1
// p2 = ((x_2 + 1) // 2) - 1
// p3 = ((((x_3 + 1) // 2) + 1) // 2) - 1
// p4 = ((x_3 + 1) // 2) - 1
// p5 = (x_3 + 1) // 2
// p6 = 64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64
// p7 = (x_2 + 1) // 2
// dv0 = magic(64*((((x_3 + 1) // 2) + 1) // 2) - 64)
// dv1 = magic(((((x_2 + 1) // 2) + 1) // 2) - 1)
// dv2 = magic(((((x_3 + 1) // 2) + 1) // 2) - 1)
// dv3 = magic(64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64)
// one thread per output element
template <typename I>
__device__ __forceinline__ void dlcb_k1_max_pool2d_nhwc_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const I numel, const I p0, const I p1, const I p2, const I p3, const I p4, const I p5, const I p6, const I p7, const long long dv0, const long long dv1, const long long dv2, const long long dv3) {
  const I step = (I)gridDim.x * blockDim.x;
  for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < numel; t += step) {
    float acc1 = ((float)(-INFINITY));
    const I i2 = dlcb_udiv<I>(t, p0, dv0);  // _t // (64*((((x_3 + 1) // 2) + 1) // 2) - 64)
    const I i3 = dlcb_umod<I>(i2, p1, dv1);  // (_t // (64*((((x_3 + 1) // 2) + 1) // 2) - 64)) % (((((x_2 + 1) // 2) + 1) // 2) - 1)
    const I i5 = t / 64;  // _t // 64
    const I i6 = dlcb_umod<I>(i5, p3, dv2);  // (_t // 64) % (((((x_3 + 1) // 2) + 1) // 2) - 1)
    const I i10 = dlcb_udiv<I>(t, p6, dv3);  // _t // (64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64)
    const I i11 = i10 * p7;  // (_t // (64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64))*((x_2 + 1...
    const I i12 = i10 * p7 * p5;  // (_t // (64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64))*((x_2 + 1...
    const I i13 = i10 * p5;  // (_t // (64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64))*((x_3 + 1...
    const I i14 = p5 * i3;  // ((x_3 + 1) // 2)*((_t // (64*((((x_3 + 1) // 2) + 1) // 2) - 64)) % (((((x_2 + 1) // 2) + 1) // 2) - 1))
    const I i15 = t % 64;  // _t % 64
    for (I l0 = 0; l0 < 3; ++l0) {
      float l1v[3];
      #pragma unroll
      for (I l1 = 0; l1 < 3; ++l1) {
        const I i4 = l0 + 2 * i3;  // _l0 + 2*((_t // (64*((((x_3 + 1) // 2) + 1) // 2) - 64)) % (((((x_2 + 1) // 2) + 1) // 2) - 1))
        const I i7 = l1 + 2 * i6;  // _l1 + 2*((_t // 64) % (((((x_3 + 1) // 2) + 1) // 2) - 1))
        const bool m8 = i4 < p2 && i7 < p4;
        const I i9 = l0 * p5;  // _l0*((x_3 + 1) // 2)
        const I i16 = (-64) * l0 + 64 * l1 + 64 * i9 + (-64) * i11 + 64 * i12 + (-64) * i13 + 128 * i14 + 64 * i10 + i15 + 128 * i6 + (-128) * i3;  // -64*_l0 + 64*_l1 + 64*_l0*((x_3 + 1) // 2) - 64*(_t // (64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 6...
        const float x17 = (m8 ? in0[i16] : 0.0f);
        const float x18 = (m8 ? in1[i15] : 0.0f);
        const float v19 = (x17 + x18);
        const float v20 = (v19 < 0.0f ? 0.0f : v19);
        l1v[l1] = (m8 ? v20 : ((float)(-INFINITY)));
      }
      #pragma unroll
      for (I l1 = 0; l1 < 3; ++l1) {
        acc1 = dlcb_max(acc1, ((float)(l1v[l1])));
      }
    }
    const float v21 = ((float)(acc1));
    out[t] = v21;
  }
}
extern "C" __global__ void dlcb_k1_max_pool2d_nhwc(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel, long long p0, long long p1, long long p2, long long p3, long long p4, long long p5, long long p6, long long p7, long long dv0, long long dv1, long long dv2, long long dv3) {
  dlcb_k1_max_pool2d_nhwc_body<long long>(out, in0, in1, numel, p0, p1, p2, p3, p4, p5, p6, p7, dv0, dv1, dv2, dv3);
}
extern "C" __global__ void dlcb_k1_max_pool2d_nhwc_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel, long long p0, long long p1, long long p2, long long p3, long long p4, long long p5, long long p6, long long p7, long long dv0, long long dv1, long long dv2, long long dv3) {
  dlcb_k1_max_pool2d_nhwc_body<int>(out, in0, in1, (int)numel, (int)p0, (int)p1, (int)p2, (int)p3, (int)p4, (int)p5, (int)p6, (int)p7, dv0, dv1, dv2, dv3);
}

// out = %max_pool2d_nhwc (f32)
// in0 = %conv2d_nhwc (f32)
// in1 = %conv2d_2 (f32)
// p0 = 64*((((x_3 + 1) // 2) + 1) // 2) - 64
// p1 = ((((x_2 + 1) // 2) + 1) // 2) - 1
// p2 = ((x_2 + 1) // 2) - 1
// p3 = ((((x_3 + 1) // 2) + 1) // 2) - 1
// p4 = ((x_3 + 1) // 2) - 1
// p5 = (x_3 + 1) // 2
// p6 = 64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64
// p7 = (x_2 + 1) // 2
// dv0 = magic(64*((((x_3 + 1) // 2) + 1) // 2) - 64)
// dv1 = magic(((((x_2 + 1) // 2) + 1) // 2) - 1)
// dv2 = magic(((((x_3 + 1) // 2) + 1) // 2) - 1)
// dv3 = magic(64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64)
// one group of threads per output element (G > 0: G lanes of a warp, else the block); the group's threads split the reduction
template <typename I, unsigned G>
__device__ __forceinline__ void dlcb_k1_max_pool2d_nhwc_blk_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const I numel, const I p0, const I p1, const I p2, const I p3, const I p4, const I p5, const I p6, const I p7, const long long dv0, const long long dv1, const long long dv2, const long long dv3) {
  constexpr unsigned L = G ? G : 1;   // a group's lanes in one warp
  const unsigned lane = G ? threadIdx.x % L : threadIdx.x;
  const unsigned gsize = G ? G : blockDim.x;   // threads per group
  const I per = G ? (I)(blockDim.x / L) : (I)1;   // outputs per block
  for (I t = (I)blockIdx.x * per + (G ? (I)(threadIdx.x / L) : (I)0); t < numel; t += (I)gridDim.x * per) {
    float acc1 = ((float)(-INFINITY));
    const I i3 = dlcb_udiv<I>(t, p0, dv0);  // _t // (64*((((x_3 + 1) // 2) + 1) // 2) - 64)
    const I i4 = dlcb_umod<I>(i3, p1, dv1);  // (_t // (64*((((x_3 + 1) // 2) + 1) // 2) - 64)) % (((((x_2 + 1) // 2) + 1) // 2) - 1)
    const I i7 = t / 64;  // _t // 64
    const I i8 = dlcb_umod<I>(i7, p3, dv2);  // (_t // 64) % (((((x_3 + 1) // 2) + 1) // 2) - 1)
    const I i12 = dlcb_udiv<I>(t, p6, dv3);  // _t // (64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64)
    const I i13 = i12 * p7;  // (_t // (64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64))*((x_2 + 1...
    const I i14 = i12 * p7 * p5;  // (_t // (64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64))*((x_2 + 1...
    const I i15 = i12 * p5;  // (_t // (64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*((((x_3 + 1) // 2) + 1) // 2) + 64))*((x_3 + 1...
    const I i16 = p5 * i4;  // ((x_3 + 1) // 2)*((_t // (64*((((x_3 + 1) // 2) + 1) // 2) - 64)) % (((((x_2 + 1) // 2) + 1) // 2) - 1))
    const I i17 = t % 64;  // _t % 64
    #pragma unroll 4
    for (I lf = lane; lf < 9; lf += gsize) {
      const I i2 = lf / 3;  // _lf // 3
      const I i5 = i2 + 2 * i4;  // (_lf // 3) + 2*((_t // (64*((((x_3 + 1) // 2) + 1) // 2) - 64)) % (((((x_2 + 1) // 2) + 1) // 2) - 1))
      const I i6 = lf % 3;  // _lf % 3
      const I i9 = i6 + 2 * i8;  // (_lf % 3) + 2*((_t // 64) % (((((x_3 + 1) // 2) + 1) // 2) - 1))
      const bool m10 = i5 < p2 && i9 < p4;
      const I i11 = i2 * p5;  // (_lf // 3)*((x_3 + 1) // 2)
      const I i18 = 64 * lf + 64 * i11 + (-64) * i13 + 64 * i14 + (-64) * i15 + 128 * i16 + (-256) * i2 + 64 * i12 + i17 + 128 * i8 + (-128) * i4;  // 64*_lf + 64*(_lf // 3)*((x_3 + 1) // 2) - 64*(_t // (64*((((x_2 + 1) // 2) + 1) // 2)*((((x_3 + 1) // 2) + 1) // 2) - 64*((((x_2 + 1) // 2) + 1) // 2) - 64*(...
      const float x19 = (m10 ? in0[i18] : 0.0f);
      const float x20 = (m10 ? in1[i17] : 0.0f);
      const float v21 = (x19 + x20);
      const float v22 = (v21 < 0.0f ? 0.0f : v21);
      if (m10) acc1 = dlcb_max(acc1, ((float)(v22)));
    }
    acc1 = dlcb_group_reduce<G, float>(acc1, (float)((float)(-INFINITY)), dlcb_max_op());
    const float v23 = ((float)(acc1));
    if (lane == 0) out[t] = v23;
  }
}
extern "C" __global__ void dlcb_k1_max_pool2d_nhwc_blk(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel, long long p0, long long p1, long long p2, long long p3, long long p4, long long p5, long long p6, long long p7, long long dv0, long long dv1, long long dv2, long long dv3) {
  dlcb_k1_max_pool2d_nhwc_blk_body<long long, 0>(out, in0, in1, numel, p0, p1, p2, p3, p4, p5, p6, p7, dv0, dv1, dv2, dv3);
}
extern "C" __global__ void dlcb_k1_max_pool2d_nhwc_blk_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel, long long p0, long long p1, long long p2, long long p3, long long p4, long long p5, long long p6, long long p7, long long dv0, long long dv1, long long dv2, long long dv3) {
  dlcb_k1_max_pool2d_nhwc_blk_body<int, 0>(out, in0, in1, (int)numel, (int)p0, (int)p1, (int)p2, (int)p3, (int)p4, (int)p5, (int)p6, (int)p7, dv0, dv1, dv2, dv3);
}
