// out = %max_pool2d_nhwc (f32)
// in0 = %conv2d_nhwc (f32)
// in1 = %conv2d_2 (f32)
// one thread per output element
template <typename I>
__device__ __forceinline__ void dlcb_k1_max_pool2d_nhwc_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const I numel) {
  const I step = (I)gridDim.x * blockDim.x;
  for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < numel; t += step) {
    float acc1 = ((float)(-INFINITY));
    const I i2 = t / 193600;  // _t // 193600
    const I i3 = t % 64;  // _t % 64
    const I i4 = t / 64;  // _t // 64
    const I i5 = i4 % 55;  // (_t // 64) % 55
    const I i6 = t / 3520;  // _t // 3520
    const I i7 = i6 % 55;  // (_t // 3520) % 55
    const float x10 = in1[i3];
    for (I l0 = 0; l0 < 3; ++l0) {
      float l1v[3];
      #pragma unroll
      for (I l1 = 0; l1 < 3; ++l1) {
        const I i8 = 7104 * l0 + 64 * l1 + 788544 * i2 + i3 + 128 * i5 + 14208 * i7;  // 7104*_l0 + 64*_l1 + 788544*(_t // 193600) + (_t % 64) + 128*((_t // 64) % 55) + 14208*((_t // 3520) % 55)
        const float x9 = in0[i8];
        const float v11 = (x9 + x10);
        const float v12 = (v11 < 0.0f ? 0.0f : v11);
        l1v[l1] = v12;
      }
      #pragma unroll
      for (I l1 = 0; l1 < 3; ++l1) {
        acc1 = dlcb_max(acc1, ((float)(l1v[l1])));
      }
    }
    const float v13 = ((float)(acc1));
    out[t] = v13;
  }
}
extern "C" __global__ void dlcb_k1_max_pool2d_nhwc(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel) {
  dlcb_k1_max_pool2d_nhwc_body<long long>(out, in0, in1, numel);
}
extern "C" __global__ void dlcb_k1_max_pool2d_nhwc_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel) {
  dlcb_k1_max_pool2d_nhwc_body<int>(out, in0, in1, (int)numel);
}

// out = %max_pool2d_nhwc (f32)
// in0 = %conv2d_nhwc (f32)
// in1 = %conv2d_2 (f32)
// one group of threads per output element (G > 0: G lanes of a warp, else the block); the group's threads split the reduction
template <typename I, unsigned G>
__device__ __forceinline__ void dlcb_k1_max_pool2d_nhwc_blk_body(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, const I numel) {
  constexpr unsigned L = G ? G : 1;   // a group's lanes in one warp
  const unsigned lane = G ? threadIdx.x % L : threadIdx.x;
  const unsigned gsize = G ? G : blockDim.x;   // threads per group
  const I per = G ? (I)(blockDim.x / L) : (I)1;   // outputs per block
  for (I t = (I)blockIdx.x * per + (G ? (I)(threadIdx.x / L) : (I)0); t < numel; t += (I)gridDim.x * per) {
    float acc1 = ((float)(-INFINITY));
    const I i3 = t / 193600;  // _t // 193600
    const I i4 = t % 64;  // _t % 64
    const I i5 = t / 64;  // _t // 64
    const I i6 = i5 % 55;  // (_t // 64) % 55
    const I i7 = t / 3520;  // _t // 3520
    const I i8 = i7 % 55;  // (_t // 3520) % 55
    const float x11 = in1[i4];
    #pragma unroll 4
    for (I lf = lane; lf < 9; lf += gsize) {
      const I i2 = lf / 3;  // _lf // 3
      const I i9 = 64 * lf + 6912 * i2 + 788544 * i3 + i4 + 128 * i6 + 14208 * i8;  // 64*_lf + 6912*(_lf // 3) + 788544*(_t // 193600) + (_t % 64) + 128*((_t // 64) % 55) + 14208*((_t // 3520) % 55)
      const float x10 = in0[i9];
      const float v12 = (x10 + x11);
      const float v13 = (v12 < 0.0f ? 0.0f : v12);
      acc1 = dlcb_max(acc1, ((float)(v13)));
    }
    acc1 = dlcb_group_reduce<G, float>(acc1, (float)((float)(-INFINITY)), dlcb_max_op());
    const float v14 = ((float)(acc1));
    if (lane == 0) out[t] = v14;
  }
}
extern "C" __global__ void dlcb_k1_max_pool2d_nhwc_blk(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel) {
  dlcb_k1_max_pool2d_nhwc_blk_body<long long, 0>(out, in0, in1, numel);
}
extern "C" __global__ void dlcb_k1_max_pool2d_nhwc_blk_i32(float* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, long long numel) {
  dlcb_k1_max_pool2d_nhwc_blk_body<int, 0>(out, in0, in1, (int)numel);
}
