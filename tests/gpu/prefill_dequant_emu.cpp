// Checks pf_dequant_kernel's (lane, word, i) → (row, k, code bits, scale index) against
// qmv_generic.cu's rep_element (the tested inverse map) for every fast format.
#include <cstdint>
#include <cstdio>
enum { CK_AFF4 = 0, CK_AFF8, CK_NVFP4, CK_MXFP4, CK_MXFP8, CK_DBF16, CK_DF16 };
static int chunk_k(int f) {
  return (f == CK_AFF4 || f == CK_NVFP4 || f == CK_MXFP4) ? 64 : (f == CK_AFF8 || f == CK_MXFP8) ? 32 : 16;
}
static int unit_k(int f, int gs) {
  return f == CK_AFF4 || f == CK_AFF8     ? (chunk_k(f) > gs ? chunk_k(f) : gs)
         : f == CK_NVFP4 || f == CK_MXFP4 ? 64
                                          : 32;
}
static int frag_row(int g, int i) { return g + 8 * ((i >> 1) & 1); }
static int frag_k(int t, int i) { return 2 * t + (i & 1) + 8 * (i >> 2); }
static void frag_of(int rr, int kk, int *lane, int *i) {
  int g = rr & 7, hi = rr >> 3, t = (kk & 7) >> 1;
  *lane = g * 4 + t;
  *i = (kk & 1) + 2 * hi + 4 * (kk >> 3);
}
static int aff4_nib(int i) { return (i >> 1) + 4 * (i & 1); }
static int mag_pos(int i) {
  const int b[4] = {9, 6, 3, 0};
  return b[i >> 1] + 16 * (i & 1);
}
// rep_element: word index and shift (code bits) and scale index
static void rep(int fmt, long cols, long nunits, int gs, long row, long k, long *word, int *shift,
                long *sidx) {
  long tile = row >> 4;
  int rr = row & 15, g = rr & 7, hi = rr >> 3, lane, i;
  if (fmt == CK_AFF4 || fmt == CK_NVFP4 || fmt == CK_MXFP4) {
    long nch = cols / 64, chunk = k / 64;
    int kc = k % 64, j = kc >> 4;
    frag_of(rr, kc & 15, &lane, &i);
    *word = ((tile * nch + chunk) * 32 + lane) * 4 + j;
    *shift = fmt == CK_AFF4 ? 4 * aff4_nib(i) : mag_pos(i);
  } else if (fmt == CK_AFF8 || fmt == CK_MXFP8) {
    long nch = cols / 32, chunk = k / 32;
    int kc = k % 32, m = kc >> 4;
    frag_of(rr, kc & 15, &lane, &i);
    *word = ((tile * nch + chunk) * 32 + lane) * 4 + 2 * m + (i >> 2);
    *shift = 8 * (i & 3);
  } else {
    long nch = cols / 16, chunk = k / 16;
    frag_of(rr, k % 16, &lane, &i);
    *word = ((tile * nch + chunk) * 32 + lane) * 4 + (i >> 1);
    *shift = 16 * (i & 1);
  }
  *sidx = -1;
  if (fmt == CK_AFF4 || fmt == CK_AFF8) {
    long ng = cols / gs, G = k / gs;
    *sidx = (((tile * ng + G) * 8 + g) * 4 + 2 * hi);
  } else if (fmt == CK_NVFP4) {
    long u = k / 64;
    int gu = (k % 64) / 16;
    *sidx = ((tile * nunits + u) * 8 + g) * 8 + (gu >> 1) * 4 + hi * 2 + (gu & 1);
  } else if (fmt == CK_MXFP4) {
    long u = k / 64;
    int gu = (k % 64) / 32;
    *sidx = ((tile * nunits + u) * 8 + g) * 4 + hi * 2 + gu;
  } else if (fmt == CK_MXFP8) {
    long u = k / 32;
    *sidx = ((tile * nunits + u) * 8 + g) * 2 + hi;
  }
}
// pf_params scale index
static long pf_sidx(int fmt, long cols, long nunits, int gs, long tile, int rr, long chunk, long k0, int kc) {
  int g = rr & 7, hi = rr >> 3, gshift = __builtin_ctz(gs ? gs : 1);
  if (fmt == CK_AFF4 || fmt == CK_AFF8) {
    long ng = cols >> gshift, G = (k0 + kc) >> gshift;
    return (((tile * ng + G) * 8 + g) * 4 + 2 * hi);
  }
  if (fmt == CK_NVFP4) {
    int gu = kc >> 4;
    return ((tile * nunits + chunk) * 8 + g) * 8 + (gu >> 1) * 4 + hi * 2 + (gu & 1);
  }
  if (fmt == CK_MXFP4)
    return ((tile * nunits + chunk) * 8 + g) * 4 + hi * 2 + (kc >> 5);
  if (fmt == CK_MXFP8)
    return ((tile * nunits + chunk) * 8 + g) * 2 + hi;
  return -1;
}
int main() {
  int bad = 0, checked = 0;
  struct {
    int fmt, gs;
  } F[] = {{CK_AFF4, 32},  {CK_AFF4, 64},  {CK_AFF4, 128}, {CK_AFF8, 32}, {CK_AFF8, 64}, {CK_AFF8, 128},
           {CK_NVFP4, 16}, {CK_MXFP4, 32}, {CK_MXFP8, 32}, {CK_DBF16, 0}, {CK_DF16, 0}};
  for (auto f : F) {
    long rows = 40, cols = 256;
    long tiles = (rows + 15) / 16, nunits = cols / unit_k(f.fmt, f.gs);
    int CK = chunk_k(f.fmt);
    long nch = cols / CK;
    static char seen[64][256];
    for (auto &r : seen)
      for (auto &c : r)
        c = 0;
    for (long tile = 0; tile < tiles; tile++)
      for (long chunk = 0; chunk < nch; chunk++)
        for (int lane = 0; lane < 32; lane++) {
          int g = lane >> 2, t = lane & 3;
          long k0 = chunk * CK;
          long wbase = ((tile * nch + chunk) * 32 + lane) * 4;
          auto check = [&](int wj, int shift, int rr, int kc) {
            long row = tile * 16 + rr, k = k0 + kc;
            if (row >= rows)
              return;
            long w2, s2;
            int sh2;
            rep(f.fmt, cols, nunits, f.gs, row, k, &w2, &sh2, &s2);
            long s1 = pf_sidx(f.fmt, cols, nunits, f.gs, tile, rr, chunk, k0, kc);
            checked++;
            if (seen[row][k]) {
              bad++;
            }
            seen[row][k] = 1;
            if (w2 != wbase + wj || sh2 != shift || s1 != s2) {
              if (bad < 10)
                printf("fmt %d gs %d row %ld k %ld: word %ld/%ld shift %d/%d scale %ld/%ld\n", f.fmt, f.gs,
                       row, k, wbase + wj, w2, shift, sh2, s1, s2);
              bad++;
            }
          };
          if (f.fmt == CK_AFF4 || f.fmt == CK_NVFP4 || f.fmt == CK_MXFP4) {
            for (int j = 0; j < 4; j++)
              for (int i = 0; i < 8; i++)
                check(j, f.fmt == CK_AFF4 ? 4 * aff4_nib(i) : mag_pos(i), frag_row(g, i),
                      16 * j + frag_k(t, i));
          } else if (f.fmt == CK_AFF8 || f.fmt == CK_MXFP8) {
            for (int wj = 0; wj < 4; wj++)
              for (int b = 0; b < 4; b++) {
                int i = 4 * (wj & 1) + b;
                check(wj, 8 * b, frag_row(g, i), 16 * (wj >> 1) + frag_k(t, i));
              }
          } else {
            for (int j = 0; j < 4; j++)
              for (int e = 0; e < 2; e++) {
                int i = 2 * j + e;
                check(j, 16 * e, frag_row(g, i), frag_k(t, i));
              }
          }
        }
    for (long r = 0; r < rows; r++)
      for (long k = 0; k < cols; k++)
        if (!seen[r][k]) {
          bad++;
          if (bad < 10)
            printf("fmt %d: (%ld,%ld) never written\n", f.fmt, r, k);
        }
  }
  printf("%d element maps checked, %d bad: %s\n", checked, bad, bad ? "FAIL" : "PASS");
  return bad != 0;
}
