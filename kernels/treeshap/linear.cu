// Per-tree path-dependent TreeSHAP (Linear TreeShap by Gauss-Legendre quadrature) for deep trees: O(nodes x Q) per
// row and tree, against O(leaves x depth^2) for the per-path DP. The derivation and the CPU twin:
// kernels/treeshap/_cpu_linear.py. The host (kernels/treeshap/_gpu_linear.py) turns each tree into a walk program
// (paths.tree_program): its depth-first events, which do not depend on the row.
//
// Layout: a block walks the trees of one tree group for RPB = blockDim / QL rows; thread (row, q) holds the row's
// value at Gauss node q (QL lanes per row, QL a power of two >= the tree's Q; lanes q >= Q carry zeros). Per thread,
// the walk's stack holds P[d] (the Gauss weight times the product of the path's nonzero merged factors at the node
// of level d) and S[d][k] (the sum of v P over the leaves finished below that node), in one slot per level
// (linear_body says how). With HITML_LINEAR_LOCAL (the host's default) the stack is a local array, which L1 caches:
// the walk touches its deepest few levels most, and the SM then holds as many rows as its registers allow, where a
// stack in shared memory (the other build) capped it at about 60 rows. With HITML_LINEAR_BITS (the default) each
// chunk of events starts with the row's branch at every one of its edges (independent loads, one ballot per QL
// events), so the walk's dependent chain reads a bit instead of waiting on the row's value. With
// HITML_LINEAR_TABLES each staged chunk also gets its edges' ratios and coefficients per lane, for each of the edge's
// three cases (the row's op, on), filled once by the block's threads with the same expressions (chunk_tables), so
// a row's walk picks one instead of dividing: the same values, with RPB-fold fewer FP64 divisions. Events:
//  * DOWN into level d on feature f: the row's branch o_e; the merged one fraction before (op: the level of the
//    feature's previous edge on the path holds it in omask, 1 where there is none) and after (on = op o_e);
//    P[d] = P[d-1] g'/g with g = z + t (o - z). A zero factor (o' = z' = 0) makes every leaf below contribute 0:
//    ``dead`` keeps the shallowest level where that happened.
//  * LEAF at level d: S[d][k] = v_k P[d] (0 below a zero factor).
//  * UP from level d: S[d-1] gets S[d] (the first child sets, the second adds), and phi_f gets
//    sum_q C_e(t_q) S[d](t_q) with C_e = z o (o_e - z_e) / (g g') (the telescoped difference of the feature's
//    factor ratio; 0 where op = 0), summed over the row's lanes by shuffles.
//  * EDGE_LEAF: an edge into a leaf, its DOWN, LEAF and UP in one event (half the nodes of a tree are leaves).
// Sums per (row, feature, output) stay in shared memory for the block's trees (use_acc) and go to phi once (or
// straight to phi where the accumulator does not fit); with det they are rounded to 64-bit fixed point, as in
// treeshap.cu, so every call gives the same bytes.

#define FULL_MASK 0xffffffffu
#ifndef EV_CHUNK
#define EV_CHUNK 128
#endif
#ifdef HITML_LINEAR_LOCAL
#define LOCAL_LEVELS 65
#define SV_LEVELS 0
#else
#define SV_LEVELS D1
#endif
#define DEAD_NONE (1 << 30)

// float32 compares as order-preserving integer keys: CuPy compiles with -ftz=true (see treeshap.cu, f32_key).
__device__ __forceinline__ int f32_key(float x) {
  int b = __float_as_int(x);
  if (b == (int)0x80000000) b = 0;
  return b < 0 ? (b ^ 0x7fffffff) : b;
}
template <typename XT> __device__ __forceinline__ bool not_above(XT a, XT b) { return a <= b; }
template <> __device__ __forceinline__ bool not_above<float>(float a, float b) { return f32_key(a) <= f32_key(b); }

__device__ __forceinline__ void out_add(double* p, double v, int det) {
  if (det) atomicAdd((unsigned long long*)p, (unsigned long long)__double2ll_rn(v));
  else atomicAdd(p, v);
}

// The row's branch at a DOWN or EDGE_LEAF event: NaN follows the event's NaN flag, else x <= t goes left.
template <typename XT>
__device__ __forceinline__ bool takes(XT x, int code, double thr) {
  if (x != x) return ((code >> 10) & 1) != 0;
  const bool le = not_above<XT>(x, (XT)thr);
  return ((code >> 9) & 1) ? le : !le;
}

// C_e at Gauss node t for the edge's case (0 where op = 0): the telescoped difference of the feature's factor ratio.
// Rows of one warp take different cases, so both cases' numerator and second factor are selected, then divided once:
// each case's value is the same expression as a branch per case would give.
__device__ __forceinline__ double coef(unsigned op, unsigned on, double zp, double zn, double t) {
  const double g1 = zp + t * (1.0 - zp);
  const double num = on ? zp - zn : -zn;
  const double g2 = on ? zn + t * (1.0 - zn) : zn * (1.0 - t) + (zn == 0.0 ? 1.0 : 0.0);
  const double c = num / (g1 * g2);
  return op ? c : 0.0;
}

// g'/g at Gauss node t for the edge's case (the row is above no zero factor, and the new factor is not zero). On
// the feature's first edge of the path (prev < 0: op = 1 and zp = 1) g = 1 + t (1 - 1) is exactly 1 and g'/1 is
// exactly g', so the division is skipped there with the same bits.
__device__ __forceinline__ double ratio(int prev, unsigned op, unsigned on, double zp, double zn, double t) {
  const double gn = on ? zn + t * (1.0 - zn) : zn * (1.0 - t);
#ifndef HITML_LINEAR_DIVIDE_FIRST
  if (prev < 0) return gn;
#endif
  const double gv = op ? zp + t * (1.0 - zp) : zp * (1.0 - t);
  return gn / gv;
}

// HITML_LINEAR_TABLES: slot c of event i's tables at lane q. Slots 0-2: the DOWN ratio for (op, on) = (1, 1),
// (1, 0), (0, 0); slots 3-4: C_e for (1, 1), (1, 0) (C_e is 0 where op = 0, and on = 1 needs op = 1).
#define TAB_SLOTS 5
#define TAB(i, c) sTab[((i) * TAB_SLOTS + (c)) * QL + q]

// Fill the chunk's tables: entry (i, lane) for every staged event, each from ratio() and coef() at the lane's Gauss
// node, so a row's pick equals what it would compute. Lanes >= Q take t = 0.5 as the walk does (their weights are 0).
__device__ __forceinline__ void chunk_tables(double* sTab, const int4* sEi, const double* sEd, int nc, int QL,
                                             int Q, const double* gq) {
  for (int j = threadIdx.x; j < nc * QL; j += blockDim.x) {
    const int i = j / QL, l = j - i * QL;
    const int4 ev = sEi[i];
    const int kind = ev.x & 3;
    if (kind == 1) continue;                                     // LEAF: no edge
    const double t = l < Q ? gq[l] : 0.5;
    const double zp = sEd[3 * i + 1], zn = sEd[3 * i + 2];
    double* e = sTab + i * TAB_SLOTS * QL + l;
    if (kind != 2) {                                             // DOWN, EDGE_LEAF: the ratios
      e[0] = ratio(ev.z, 1u, 1u, zp, zn, t);
      e[QL] = ratio(ev.z, 1u, 0u, zp, zn, t);
      e[2 * QL] = ev.z < 0 ? 0.0 : ratio(ev.z, 0u, 0u, zp, zn, t);   // op = 0 needs a previous edge
    }
    if (kind != 0) {                                             // UP, EDGE_LEAF: the coefficients
      e[3 * QL] = coef(1u, 1u, zp, zn, t);
      e[4 * QL] = coef(1u, 0u, zp, zn, t);
    }
  }
}

// The sum of c over the row's QL lanes (butterfly shuffles; every lane gets it). QLT > 0: the lane count known at
// compile time (the loop unrolls); 0: QL at run time.
template <int QLT>
__device__ __forceinline__ double lane_sum(double c, int QL) {
  if (QLT > 0) {
#pragma unroll
    for (int off = QLT >> 1; off > 0; off >>= 1) c += __shfl_xor_sync(FULL_MASK, c, off);
  } else {
    for (int off = QL >> 1; off > 0; off >>= 1) c += __shfl_xor_sync(FULL_MASK, c, off);
  }
  return c;
}

// Closing an edge: the child's sum s goes to the parent's slot su (the first child sets it, the second adds), and
// the edge's term C s, summed over the row's lanes, to the row's output: the block's accumulator (acc >= 0, an index
// into sAcc) or phi at out. Skipped where the warp's terms are all 0 (rows off the feature, op = 0, or below a zero
// factor).
template <int QLT>
__device__ __forceinline__ void close_edge(double s, double* su, bool first, double C, int QL, bool adds,
                                           double* sAcc, int acc, double* phi, long long out, int det) {
  *su = first ? s : *su + s;
  double c = C * s;
  if (!__any_sync(FULL_MASK, c != 0.0)) return;
  c = lane_sum<QLT>(c, QL);
  if (adds && c != 0.0) {
    if (acc >= 0) sAcc[acc] += c;
    else out_add(phi + out, c, det);
  }
}

// QLT, KST > 0: the lanes per row and the outputs per walk known at compile time (a module built with LIN_QL and
// LIN_KS); 0: taken from ql, ks at run time. The same arithmetic either way.
template <typename XT, int QLT, int KST>
__device__ __forceinline__ void linear_body(const XT* X, long long n_rows, int M, int K, const int4* evi,
                                            const double* evd, const long long* tree_ev, const int* tree_q,
                                            const int* group_tree, const double* gl, const double* lval, int kg0,
                                            int ks, int ql, int D1, int use_acc, double* phi, int det,
                                            double* smem) {
  const int QL = QLT > 0 ? QLT : ql;
  const int KS = KST > 0 ? KST : ks;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int q = tid & (QL - 1);
  const int rl = tid / QL;
  const int RPB = nt / QL;
  const long long n_rb = (n_rows + RPB - 1) / RPB;
  const int g = (int)(blockIdx.x / n_rb);
  const long long rb = blockIdx.x % n_rb;
  const long long row = rb * RPB + rl;
  const bool live = row < n_rows;
  const XT* xrow = X + (live ? row : n_rows - 1) * (long long)M;
  const long long out0 = row * (M + 1) * (long long)K + kg0;   // phi's offset of the row's first feature
  const int acc0 = use_acc ? rl * M * KS : -1;                  // sAcc's offset of the row's first feature
  // One slot of KS doubles per level and thread: P[d] (in its first double) while the walk is in the node's first
  // subtree, then S[d] (the first subtree's sums, to which the second adds): the step between the two subtrees
  // (UP from the first child, then DOWN into the second) carries P[d] in a register (p_hold).
#ifdef HITML_LINEAR_LOCAL
  // the stack in the thread's local memory (cached in L1): occupancy no longer bounded by the stack's shared memory
  double stk[LOCAL_LEVELS * (KST > 0 ? KST : 4)];
  double* sV = smem;                                   // none in shared memory
#define SVP(d, k) (stk + (d) * KS + (k))
#else
  double* sV = smem;                                   // [D1][KS][nt]
#define SVP(d, k) (sV + ((d) * KS + (k)) * nt + tid)
#endif
  double* sAcc = sV + (long long)SV_LEVELS * KS * nt;  // [RPB][M][KS] (use_acc)
  double* sEd = sAcc + (use_acc ? RPB * M * KS : 0);   // [EV_CHUNK][3]
  int4* sEi = (int4*)(sEd + 3 * EV_CHUNK);             // [EV_CHUNK]
#ifdef HITML_LINEAR_TABLES
  double* sTab = (double*)(sEi + EV_CHUNK);            // [EV_CHUNK][TAB_SLOTS][QL]
#endif
  if (use_acc)
    for (int i = tid; i < RPB * M * KS; i += nt) sAcc[i] = 0.0;
  for (int t = group_tree[g]; t < group_tree[g + 1]; ++t) {
    const int Q = tree_q[t];
    const bool qa = q < Q;
#ifdef HITML_LINEAR_TABLES
    const double* gq = gl + Q * (Q - 1);               // the tree's Gauss nodes, for the chunks' tables
#else
    const double tq = qa ? gl[Q * (Q - 1) + q] : 0.5;
#endif
    *SVP(0, 0) = qa ? gl[Q * (Q - 1) + Q + q] : 0.0;   // level 0: the Gauss weight
    double p_hold = 0.0;
    unsigned long long omask = 0ull;
    int dead = DEAD_NONE;
    const long long e0 = tree_ev[t], e1 = tree_ev[t + 1];
    for (long long c0 = e0; c0 < e1; c0 += EV_CHUNK) {
      const int nc = (int)min((long long)EV_CHUNK, e1 - c0);
      __syncthreads();
      for (int i = tid; i < nc; i += nt) sEi[i] = evi[c0 + i];
      for (int i = tid; i < 3 * nc; i += nt) sEd[i] = evd[3 * c0 + i];
      __syncthreads();
#ifdef HITML_LINEAR_TABLES
      chunk_tables(sTab, sEi, sEd, nc, QL, Q, gq);
      __syncthreads();
// (zp, zn read as the divisions would: the tables hold what those give)
#define RATIO(i, op, on) ((void)zp, (void)zn, TAB(i, (on) ? 0 : ((op) ? 1 : 2)))
#define COEF(i, op, on) ((void)zp, (void)zn, (op) ? TAB(i, (on) ? 3 : 4) : 0.0)
#else
#define RATIO(i, op, on) ratio(ev.z, op, on, zp, zn, tq)
#define COEF(i, op, on) coef(op, on, zp, zn, tq)
#endif
#ifdef HITML_LINEAR_BITS
      // The row's branch at each of the chunk's DOWN and EDGE_LEAF events, before the walk: lane q of the row tests
      // events q, q + QL, ... (independent loads in flight), and a warp ballot gives every lane the row's bits
      // (br0: events 0-63, br1: 64-127). The walk's chain then reads a bit instead of waiting on the row's value.
      unsigned long long br0 = 0ull, br1 = 0ull;
      {
        const int sh = (tid & 31) & ~(QL - 1);
        const unsigned low = QL == 32 ? 0xffffffffu : ((1u << QL) - 1u);
#pragma unroll 4
        for (int j = 0; j < EV_CHUNK; j += QL) {
          const int i = j + q;
          bool b = false;
          if (i < nc) {
            const int4 ev = sEi[i];
            const int kind = ev.x & 3;
            if (kind == 0 || kind == 3) b = takes<XT>(xrow[ev.y], ev.x, sEd[3 * i]);
          }
          const unsigned long long bits = (unsigned long long)((__ballot_sync(FULL_MASK, b) >> sh) & low);
          if (j < 64) br0 |= bits << j;
          else br1 |= bits << (j - 64);
        }
      }
#define ROW_TAKES(i, ev) ((bits & 1ull) != 0)
#else
      const unsigned long long br0 = 0ull, br1 = 0ull;
#define ROW_TAKES(i, ev) takes<XT>(xrow[(ev).y], (ev).x, sEd[3 * (i)])
#endif
      for (int h = 0; h < nc; h += 64) {                 // events h..h+63: the row's branch bits shift by one per event
      unsigned long long bits = h ? br1 : br0;
      const int he = min(nc, h + 64);
      for (int i = h; i < he; ++i, bits >>= 1) {
        const int4 ev = sEi[i];
        const int kind = ev.x & 3;
        const int d = (ev.x >> 2) & 127;
        if (kind == 0) {                                 // DOWN into level d
          const unsigned op = ev.z < 0 ? 1u : (unsigned)((omask >> ev.z) & 1ull);
          const unsigned on = ROW_TAKES(i, ev) ? op : 0u;
          omask = (omask & ~(1ull << d)) | ((unsigned long long)on << d);
          if (dead > d - 1) {
            const double zp = sEd[3 * i + 1], zn = sEd[3 * i + 2];
            if (!on && zn == 0.0) {
              dead = d;
            } else {
              const double pp = ((ev.x >> 11) & 1) ? *SVP(d - 1, 0) : p_hold;   // the first child entered
              *SVP(d, 0) = pp * RATIO(i, op, on);
            }
          }
        } else if (kind == 3) {                          // an edge into a leaf at level d: DOWN, LEAF and UP
          const bool first = ((ev.x >> 11) & 1) != 0;
          const unsigned op = ev.z < 0 ? 1u : (unsigned)((omask >> ev.z) & 1ull);
          const unsigned on = ROW_TAKES(i, ev) ? op : 0u;
          const double zp = sEd[3 * i + 1], zn = sEd[3 * i + 2];
          const double pp = first ? *SVP(d - 1, 0) : p_hold;
          const double pv = (dead > d - 1 && (on || zn != 0.0)) ? pp * RATIO(i, op, on) : 0.0;
          const double C = COEF(i, op, on);
          if (first) p_hold = pp;
          const double* v = lval + (long long)ev.w * K + kg0;
          for (int k = 0; k < KS; ++k)
            close_edge<QLT>(v[k] * pv, SVP(d - 1, k), first, C, QL, q == 0 && live, sAcc,
                            acc0 < 0 ? -1 : acc0 + ev.y * KS + k, phi, out0 + (long long)ev.y * K + k, det);
        } else if (kind == 1) {                          // LEAF at level d
          const double pv = dead > d ? *SVP(d, 0) : 0.0;
          const double* v = lval + (long long)ev.y * K + kg0;
          for (int k = 0; k < KS; ++k) *SVP(d, k) = v[k] * pv;
        } else {                                         // UP from level d
          const unsigned op = ev.z < 0 ? 1u : (unsigned)((omask >> ev.z) & 1ull);
          const unsigned on = (unsigned)((omask >> d) & 1ull);
          const double zp = sEd[3 * i + 1], zn = sEd[3 * i + 2];
          const double C = COEF(i, op, on);
          const bool first = ((ev.x >> 11) & 1) != 0;
          if (first) p_hold = *SVP(d - 1, 0);
          for (int k = 0; k < KS; ++k)
            close_edge<QLT>(*SVP(d, k), SVP(d - 1, k), first, C, QL, q == 0 && live, sAcc,
                            acc0 < 0 ? -1 : acc0 + ev.y * KS + k, phi, out0 + (long long)ev.y * K + k, det);
          if (dead == d) dead = DEAD_NONE;
        }
      }
      }
    }
  }
#undef ROW_TAKES
#undef RATIO
#undef COEF
#undef SVP
  if (!use_acc) return;
  __syncthreads();
  for (int i = tid; i < RPB * M * KS; i += nt) {
    const int r = i / (M * KS);
    const int rem = i - r * M * KS;
    const long long rw = rb * RPB + r;
    const double v = sAcc[i];
    if (rw < n_rows && v != 0.0) out_add(phi + (rw * (M + 1) + rem / KS) * K + kg0 + rem % KS, v, det);
  }
}

#define LINEAR_KERNEL(XT, SUF, QLT, KST)                                                                              \
  extern "C" __global__ void linear_shap_##SUF(const XT* X, long long n_rows, int M, int K, const int4* evi,          \
                                               const double* evd, const long long* tree_ev, const int* tree_q,        \
                                               const int* group_tree, const double* gl, const double* lval, int kg0,  \
                                               int KS, int QL, int D1, int use_acc, double* phi, int det) {           \
    extern __shared__ double s_lin[];                                                                                 \
    linear_body<XT, QLT, KST>(X, n_rows, M, K, evi, evd, tree_ev, tree_q, group_tree, gl, lval, kg0, KS, QL, D1,      \
                              use_acc, phi, det, s_lin);                                                              \
  }

// LIN_QL, LIN_KS (compile options): the lanes per row and the outputs per walk this module's kernels are built for;
// 0 or absent: any, read from the arguments QL and KS. The host builds a module per common (QL, KS) pair.
#ifndef LIN_QL
#define LIN_QL 0
#endif
#ifndef LIN_KS
#define LIN_KS 0
#endif
LINEAR_KERNEL(float, f32, LIN_QL, LIN_KS)
LINEAR_KERNEL(double, f64, LIN_QL, LIN_KS)
