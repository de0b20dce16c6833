// optr-expm.c - the matrix exponential of OptR's parameterisation R = R_base·expm(S)
// and the gradient through it, in fp64 with a fixed operation order.
//
// Scaling and squaring: Z = X/2^s with ‖Z‖₁ <= 1/4, a Taylor series of
// N_TERMS terms (the remainder is below 0.25^15/15! ~ 1e-21, far under fp64
// rounding), then s squarings. The Fréchet derivative L(X, H) = d/dt expm(X + tH)
// at t = 0 follows the same steps: with T_k = Z^k/k! and
// U_k = (1/k!)·Σ_{i<k} Z^i·H'·Z^(k−1−i) (H' = H/2^s),
//   T_k = Z·T_{k−1}/k,  U_k = (Z·U_{k−1} + H'·T_{k−1})/k,
// and each squaring E ← E², L ← E·L + L·E (the product rule). The gradient of
// <G, expm(X)> with respect to X is L(Xᵀ, G) (the adjoint of the Fréchet
// derivative of expm is the derivative at the transpose), which is what the
// optimiser needs. Refuses nothing (shapes are the caller's).
#include <math.h>
#include <string.h>

#include "rotation/optr-internal.h"
#include "util/blas.h"

enum { N_TERMS = 14 };

// C = A·B (D x D); one thread (the caller parallelises over heads).
static void mm(const double * A, const double * B, int32_t D, double * C) {
    osc_dgemm(1, CblasNoTrans, CblasNoTrans, D, D, D, 1.0, A, D, B, D, 0.0, C, D);
}

// Squarings s so that ‖X‖₁ / 2^s <= 1/4 (max column sum).
static int n_squarings(const double * X, int32_t D) {
    double norm = 0.0;
    for (int32_t j = 0; j < D; j++) {
        double c = 0.0;
        for (int32_t i = 0; i < D; i++) c += fabs(X[(size_t) i * D + j]);
        if (c > norm) norm = c;
    }
    int s = 0;
    while (norm > 0.25 && s < 60) norm *= 0.5, s++;
    return s;
}

// Shared core: E = expm(X) and, when H != NULL, Lo = L(X, H).
// work: 8·D² doubles (4·D² without H).
static void expm_frechet(const double * X, const double * H, int32_t D, double * E, double * Lo, double * work) {
    const size_t n = (size_t) D * D;
    double * Z = work, * T = Z + n, * Tn = T + n, * tmp = Tn + n;
    double * Hs = tmp + n, * U = Hs + n, * Un = U + n, * tmp2 = Un + n;
    const int s = n_squarings(X, D);
    const double f = ldexp(1.0, -s);
    for (size_t i = 0; i < n; i++) Z[i] = X[i] * f;
    memset(T, 0, n * sizeof(double));
    for (int32_t i = 0; i < D; i++) T[(size_t) i * D + i] = 1.0;
    memcpy(E, T, n * sizeof(double));
    if (H) {
        for (size_t i = 0; i < n; i++) Hs[i] = H[i] * f;
        memset(U, 0, n * sizeof(double));
        memset(Lo, 0, n * sizeof(double));
    }
    for (int k = 1; k <= N_TERMS; k++) {
        if (H) { // U_k = (Z·U_{k-1} + H'·T_{k-1}) / k, from the old T
            mm(Z, U, D, Un);
            mm(Hs, T, D, tmp2);
            for (size_t i = 0; i < n; i++) U[i] = (Un[i] + tmp2[i]) / k;
            for (size_t i = 0; i < n; i++) Lo[i] += U[i];
        }
        mm(Z, T, D, Tn);
        for (size_t i = 0; i < n; i++) T[i] = Tn[i] / k;
        for (size_t i = 0; i < n; i++) E[i] += T[i];
    }
    for (int j = 0; j < s; j++) {
        if (H) { // L <- E·L + L·E
            mm(E, Lo, D, tmp);
            mm(Lo, E, D, tmp2);
            for (size_t i = 0; i < n; i++) Lo[i] = tmp[i] + tmp2[i];
        }
        mm(E, E, D, tmp);
        memcpy(E, tmp, n * sizeof(double));
    }
}

void osc_optr_expm(const double * X, int32_t D, double * E, double * work) {
    expm_frechet(X, NULL, D, E, NULL, work);
}

void osc_optr_expm_grad(const double * X, const double * G, int32_t D, double * E, double * G_X, double * work) {
    const size_t n = (size_t) D * D;
    // work: [0, 8n) for the core, Xt and Et after it.
    double * Xt = work + 8 * n, * Et = Xt + n;
    for (int32_t i = 0; i < D; i++)
        for (int32_t j = 0; j < D; j++) Xt[(size_t) i * D + j] = X[(size_t) j * D + i];
    expm_frechet(Xt, G, D, Et, G_X, work);
    for (int32_t i = 0; i < D; i++) // expm(X) = expm(Xᵀ)ᵀ
        for (int32_t j = 0; j < D; j++) E[(size_t) i * D + j] = Et[(size_t) j * D + i];
}
