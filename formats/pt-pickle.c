// pt-pickle.c - the restricted unpickler of pt-reader.h.
//
// A stack machine over an allow-list of opcodes. Values live in one arena
// (every value made is listed in the vm and freed with it), so memo
// references and shared storages need no reference counts, and nothing ever
// walks the object graph recursively: a pickle that builds a cycle or a deep
// chain through the memo cannot blow the C stack. Only four kinds of global
// are resolved, to tags, never to code.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/pt-internal.h"

#define PK_MAX_DEPTH   64
#define PK_MAX_VALUES  (1u << 20)
#define PK_MAX_MEMO    (1u << 20)
#define PK_MAX_STR     (1u << 20)
#define PK_MAX_NUMEL   (1ull << 28)

enum pk_global { G_REBUILD_TENSOR, G_REBUILD_PARAM, G_ODICT, G_STORAGE_F32, G_STORAGE_F64, G_STORAGE_F16, G_STORAGE_BF16 };

static const struct { const char * module, * name; } allowed[] = {
    [G_REBUILD_TENSOR] = { "torch._utils", "_rebuild_tensor_v2" },
    [G_REBUILD_PARAM]  = { "torch._utils", "_rebuild_parameter" },
    [G_ODICT]          = { "collections", "OrderedDict" },
    [G_STORAGE_F32]    = { "torch", "FloatStorage" },
    [G_STORAGE_F64]    = { "torch", "DoubleStorage" },
    [G_STORAGE_F16]    = { "torch", "HalfStorage" },
    [G_STORAGE_BF16]   = { "torch", "BFloat16Storage" },
};
#define N_ALLOWED (sizeof allowed / sizeof allowed[0])

struct osc_pt_vm {
    struct osc_pt_value ** all;
    size_t                 n_all, cap_all;
};

struct pk {
    const uint8_t *        p;
    size_t                 n, pos, op_at; // op_at: offset of the opcode being run
    const char *           label;
    osc_pt_storage_fn      load;
    void *                 ctx;
    struct osc_pt_vm *     vm;
    struct osc_pt_value ** stack;
    size_t                 sp, cap;
    size_t                 marks[PK_MAX_DEPTH];
    int                    n_marks;
    struct osc_pt_value ** memo;
    size_t                 n_memo, memo_count; // slots allocated, slots set (MEMOIZE's index)
};

// ---- opcode names, for messages ----------------------------------------------------
static const char * op_name(uint8_t op) {
    static const struct { uint8_t op; const char * name; } t[] = {
        { '(', "MARK" }, { '.', "STOP" }, { '0', "POP" }, { '1', "POP_MARK" }, { '2', "DUP" }, { 'F', "FLOAT" },
        { 'I', "INT" }, { 'J', "BININT" }, { 'K', "BININT1" }, { 'L', "LONG" }, { 'M', "BININT2" }, { 'N', "NONE" },
        { 'P', "PERSID" }, { 'Q', "BINPERSID" }, { 'R', "REDUCE" }, { 'S', "STRING" }, { 'T', "BINSTRING" },
        { 'U', "SHORT_BINSTRING" }, { 'V', "UNICODE" }, { 'X', "BINUNICODE" }, { 'a', "APPEND" }, { 'b', "BUILD" },
        { 'c', "GLOBAL" }, { 'd', "DICT" }, { '}', "EMPTY_DICT" }, { 'e', "APPENDS" }, { 'g', "GET" },
        { 'h', "BINGET" }, { 'i', "INST" }, { 'j', "LONG_BINGET" }, { 'l', "LIST" }, { ']', "EMPTY_LIST" },
        { 'o', "OBJ" }, { 'p', "PUT" }, { 'q', "BINPUT" }, { 'r', "LONG_BINPUT" }, { 's', "SETITEM" },
        { 't', "TUPLE" }, { ')', "EMPTY_TUPLE" }, { 'u', "SETITEMS" }, { 'G', "BINFLOAT" }, { 0x80, "PROTO" },
        { 0x81, "NEWOBJ" }, { 0x82, "EXT1" }, { 0x83, "EXT2" }, { 0x84, "EXT4" }, { 0x85, "TUPLE1" },
        { 0x86, "TUPLE2" }, { 0x87, "TUPLE3" }, { 0x88, "NEWTRUE" }, { 0x89, "NEWFALSE" }, { 0x8a, "LONG1" },
        { 0x8b, "LONG4" }, { 'B', "BINBYTES" }, { 'C', "SHORT_BINBYTES" }, { 0x8c, "SHORT_BINUNICODE" },
        { 0x8d, "BINUNICODE8" }, { 0x8e, "BINBYTES8" }, { 0x8f, "EMPTY_SET" }, { 0x90, "ADDITEMS" },
        { 0x91, "FROZENSET" }, { 0x92, "NEWOBJ_EX" }, { 0x93, "STACK_GLOBAL" }, { 0x94, "MEMOIZE" },
        { 0x95, "FRAME" }, { 0x96, "BYTEARRAY8" }, { 0x97, "NEXT_BUFFER" }, { 0x98, "READONLY_BUFFER" },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].op == op) return t[i].name;
    return "unknown";
}

__attribute__((format(printf, 2, 3))) static enum oscar_status fail(const struct pk * k, const char * fmt, ...) {
    char    what[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return osc_error(OSCAR_ERR_FORMAT, "%s: data.pkl offset %zu: %s", k->label, k->op_at, what);
}

// ---- values -----------------------------------------------------------------------
static struct osc_pt_value * new_value(struct pk * k, enum osc_pt_kind kind) {
    struct osc_pt_vm * vm = k->vm;
    if (vm->n_all >= PK_MAX_VALUES) return NULL;
    if (vm->n_all == vm->cap_all) {
        size_t                 cap = vm->cap_all ? 2 * vm->cap_all : 256;
        struct osc_pt_value ** a   = realloc(vm->all, cap * sizeof *a);
        if (!a) return NULL;
        vm->all     = a;
        vm->cap_all = cap;
    }
    struct osc_pt_value * v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->kind              = kind;
    vm->all[vm->n_all++] = v;
    return v;
}

// Appends child to container c; false when out of memory or too deep.
static bool add_item(struct osc_pt_value * c, struct osc_pt_value * child) {
    if (child->depth + 1 > PK_MAX_DEPTH) return false;
    if (c->n == c->cap) {
        size_t                 cap = c->cap ? 2 * c->cap : 4;
        struct osc_pt_value ** a   = realloc(c->items, cap * sizeof *a);
        if (!a) return false;
        c->items = a;
        c->cap   = cap;
    }
    c->items[c->n++] = child;
    if (child->depth + 1 > c->depth) c->depth = child->depth + 1;
    return true;
}

void osc_pt_vm_free(struct osc_pt_vm * vm) {
    if (!vm) return;
    for (size_t i = 0; i < vm->n_all; i++) {
        free(vm->all[i]->items);
        free((char *) (uintptr_t) vm->all[i]->str);
        free(vm->all[i]);
    }
    free(vm->all);
    free(vm);
}

// ---- stack ------------------------------------------------------------------------
static enum oscar_status push(struct pk * k, struct osc_pt_value * v) {
    if (!v) return osc_error(OSCAR_ERR_NOMEM, "%s: data.pkl: out of memory or more than %u values", k->label, PK_MAX_VALUES);
    if (k->sp == k->cap) {
        size_t                 cap = k->cap ? 2 * k->cap : 64;
        struct osc_pt_value ** s   = realloc(k->stack, cap * sizeof *s);
        if (!s) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
        k->stack = s;
        k->cap   = cap;
    }
    k->stack[k->sp++] = v;
    return OSCAR_OK;
}

// The lowest stack index the current opcode may pop down to (the top mark).
static size_t floor_of(const struct pk * k) { return k->n_marks ? k->marks[k->n_marks - 1] : 0; }

static struct osc_pt_value * pop(struct pk * k) { return k->sp > floor_of(k) ? k->stack[--k->sp] : NULL; }
static struct osc_pt_value * top(struct pk * k) { return k->sp > floor_of(k) ? k->stack[k->sp - 1] : NULL; }

static enum oscar_status need(struct pk * k, size_t n) {
    if (k->n - k->pos < n) return fail(k, "%s argument runs past the end (truncated)", op_name(k->p[k->op_at]));
    return OSCAR_OK;
}

static uint64_t rd_le(const uint8_t * p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

// ---- opcodes ----------------------------------------------------------------------
static enum oscar_status op_int(struct pk * k, int nbytes, bool is_signed) {
    enum oscar_status st = need(k, (size_t) nbytes);
    if (st) return st;
    uint64_t u = rd_le(k->p + k->pos, nbytes);
    k->pos += (size_t) nbytes;
    struct osc_pt_value * v = new_value(k, OSC_PT_INT);
    if (v) v->i = is_signed ? (int64_t) (int32_t) (uint32_t) u : (int64_t) u;
    return push(k, v);
}

static enum oscar_status op_long1(struct pk * k) {
    enum oscar_status st = need(k, 1);
    if (st) return st;
    int n = k->p[k->pos++];
    if ((st = need(k, (size_t) n))) return st;
    if (n > 8) return fail(k, "LONG1 of %d bytes: integer too large", n);
    uint64_t u = n ? rd_le(k->p + k->pos, n) : 0;
    if (n > 0 && n < 8 && (k->p[k->pos + (size_t) n - 1] & 0x80)) u |= ~0ull << (8 * n); // sign-extend
    k->pos += (size_t) n;
    struct osc_pt_value * v = new_value(k, OSC_PT_INT);
    if (v) v->i = (int64_t) u;
    return push(k, v);
}

static enum oscar_status op_binfloat(struct pk * k) {
    enum oscar_status st = need(k, 8);
    if (st) return st;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++) u = u << 8 | k->p[k->pos + (size_t) i]; // big-endian
    k->pos += 8;
    double d;
    memcpy(&d, &u, sizeof d);
    struct osc_pt_value * v = new_value(k, OSC_PT_FLOAT);
    if (v) v->f = d;
    return push(k, v);
}

static enum oscar_status op_unicode(struct pk * k, int len_bytes) {
    enum oscar_status st = need(k, (size_t) len_bytes);
    if (st) return st;
    uint64_t n = rd_le(k->p + k->pos, len_bytes);
    k->pos += (size_t) len_bytes;
    if (n > PK_MAX_STR) return fail(k, "string of %llu bytes, longer than the 1 MiB limit", (unsigned long long) n);
    if ((st = need(k, (size_t) n))) return st;
    struct osc_pt_value * v = new_value(k, OSC_PT_STR);
    char *                s = v ? malloc((size_t) n + 1) : NULL;
    if (v && !s) v = NULL;
    if (v) {
        memcpy(s, k->p + k->pos, (size_t) n);
        s[n]   = '\0';
        v->str = s;
        v->len = (size_t) n;
    }
    k->pos += (size_t) n;
    return push(k, v);
}

static enum oscar_status resolve_global(struct pk * k, const char * module, const char * name) {
    for (size_t g = 0; g < N_ALLOWED; g++) {
        if (!strcmp(module, allowed[g].module) && !strcmp(name, allowed[g].name)) {
            struct osc_pt_value * v = new_value(k, OSC_PT_GLOBAL);
            if (v) v->i = (int64_t) g;
            return push(k, v);
        }
    }
    return fail(k, "global '%.90s.%.90s' is not allowed (only torch tensor rebuilds, storage types and OrderedDict; "
                   "nothing in a .pt file is executed)", module, name);
}

// GLOBAL: "module\nname\n".
static enum oscar_status op_global(struct pk * k) {
    char          part[2][128];
    for (int i = 0; i < 2; i++) {
        const uint8_t * nl = memchr(k->p + k->pos, '\n', k->n - k->pos);
        size_t          len = nl ? (size_t) (nl - (k->p + k->pos)) : 0;
        if (!nl || len >= sizeof part[i]) return fail(k, "GLOBAL argument is not a short 'module\\nname\\n'");
        memcpy(part[i], k->p + k->pos, len);
        part[i][len] = '\0';
        if (strlen(part[i]) != len) return fail(k, "GLOBAL argument holds a NUL byte");
        k->pos += len + 1;
    }
    return resolve_global(k, part[0], part[1]);
}

static enum oscar_status op_stack_global(struct pk * k) {
    struct osc_pt_value * name = pop(k), * module = pop(k);
    if (!name || !module || name->kind != OSC_PT_STR || module->kind != OSC_PT_STR)
        return fail(k, "STACK_GLOBAL wants two strings on the stack");
    return resolve_global(k, module->str, name->str);
}

// A tuple of the n values above the top mark (mark true) or of the top n.
static enum oscar_status make_tuple(struct pk * k, bool from_mark, size_t n, enum osc_pt_kind kind) {
    if (from_mark) {
        if (!k->n_marks) return fail(k, "%s without a MARK", op_name(k->p[k->op_at]));
        n = k->sp - k->marks[--k->n_marks];
    } else if (k->sp - floor_of(k) < n) {
        return fail(k, "%s finds too few values on the stack", op_name(k->p[k->op_at]));
    }
    struct osc_pt_value * t = new_value(k, kind);
    if (!t) return push(k, NULL);
    for (size_t i = k->sp - n; i < k->sp; i++)
        if (!add_item(t, k->stack[i])) return fail(k, "containers nested deeper than 64 (or out of memory)");
    k->sp -= n;
    return push(k, t);
}

// DICT: MARK k v k v ... -> a dict of those pairs.
static enum oscar_status make_dict(struct pk * k) {
    if (!k->n_marks) return fail(k, "DICT without a MARK");
    size_t start = k->marks[--k->n_marks];
    if ((k->sp - start) % 2) return fail(k, "DICT with an odd number of keys and values");
    struct osc_pt_value * d = new_value(k, OSC_PT_DICT);
    if (!d) return push(k, NULL);
    for (size_t i = start; i < k->sp; i++)
        if (!add_item(d, k->stack[i])) return fail(k, "containers nested deeper than 64 (or out of memory)");
    k->sp = start;
    return push(k, d);
}

// SETITEM(S), APPEND(S): pairs or items above the mark (or the top 1-2) into the container below.
static enum oscar_status fill(struct pk * k, bool from_mark, bool dict) {
    size_t start;
    if (from_mark) {
        if (!k->n_marks) return fail(k, "%s without a MARK", op_name(k->p[k->op_at]));
        start = k->marks[--k->n_marks];
    } else {
        size_t want = dict ? 2 : 1;
        if (k->sp - floor_of(k) < want + 1) return fail(k, "%s finds too few values on the stack", op_name(k->p[k->op_at]));
        start = k->sp - want;
    }
    if (start <= floor_of(k)) return fail(k, "%s has no container below its items", op_name(k->p[k->op_at]));
    struct osc_pt_value * c = k->stack[start - 1];
    if (c->kind != (dict ? OSC_PT_DICT : OSC_PT_LIST))
        return fail(k, "%s on a %s", dict ? "SETITEM(S)" : "APPEND(S)", osc_pt_kind_name(c->kind));
    if (dict && (k->sp - start) % 2) return fail(k, "SETITEMS with an odd number of keys and values");
    for (size_t i = start; i < k->sp; i++)
        if (!add_item(c, k->stack[i])) return fail(k, "containers nested deeper than 64 (or out of memory)");
    k->sp = start;
    return OSCAR_OK;
}

static enum oscar_status memo_put(struct pk * k, uint64_t idx) {
    struct osc_pt_value * v = top(k);
    if (!v) return fail(k, "%s with an empty stack", op_name(k->p[k->op_at]));
    if (idx >= PK_MAX_MEMO) return fail(k, "memo index %llu beyond the 2^20-slot limit", (unsigned long long) idx);
    if (idx >= k->n_memo) {
        size_t                 n = (size_t) idx + 1 > 2 * k->n_memo ? (size_t) idx + 1 : 2 * k->n_memo;
        struct osc_pt_value ** m = realloc(k->memo, n * sizeof *m);
        if (!m) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
        memset(m + k->n_memo, 0, (n - k->n_memo) * sizeof *m);
        k->memo   = m;
        k->n_memo = n;
    }
    if (!k->memo[idx]) k->memo_count++;
    k->memo[idx] = v;
    return OSCAR_OK;
}

static enum oscar_status memo_get(struct pk * k, uint64_t idx) {
    if (idx >= k->n_memo || !k->memo[idx]) {
        return fail(k, "memo index %llu was never stored (out of range)", (unsigned long long) idx);
    }
    return push(k, k->memo[idx]);
}

static size_t dtype_size(enum osc_pt_dtype d) { return d == OSC_PT_F64 ? 8 : d == OSC_PT_F32 ? 4 : 2; }

// BINPERSID: ('storage', <storage class>, key, location, numel) -> a STORAGE value.
static enum oscar_status op_persid(struct pk * k) {
    struct osc_pt_value * t = pop(k);
    if (!t || t->kind != OSC_PT_TUPLE || t->n != 5 || t->items[0]->kind != OSC_PT_STR ||
        strcmp(t->items[0]->str, "storage") || t->items[1]->kind != OSC_PT_GLOBAL || t->items[2]->kind != OSC_PT_STR ||
        t->items[3]->kind != OSC_PT_STR || t->items[4]->kind != OSC_PT_INT)
        return fail(k, "persistent id is not ('storage', <storage type>, key, location, numel)");
    int64_t g = t->items[1]->i;
    if (g < G_STORAGE_F32) return fail(k, "persistent id names %s, not a storage type", allowed[g].name);
    const char * key = t->items[2]->str;
    if (!*key || strspn(key, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_") != strlen(key))
        return fail(k, "storage key '%.64s' is not a plain record name", key);
    enum osc_pt_dtype dt    = (enum osc_pt_dtype) (g - G_STORAGE_F32);
    int64_t           numel = t->items[4]->i;
    const uint8_t *   data  = NULL;
    uint64_t          nbytes = 0;
    enum oscar_status st     = k->load(k->ctx, key, &data, &nbytes);
    if (st != OSCAR_OK) return osc_error_prefix(st, "%s: data.pkl offset %zu", k->label, k->op_at);
    if (numel < 0 || (uint64_t) numel > nbytes / dtype_size(dt) || (uint64_t) numel * dtype_size(dt) != nbytes) {
        return fail(k, "storage '%.32s' declares %lld %s elements (%zu bytes each), but data/%.32s holds %llu bytes",
                    key, (long long) numel, osc_pt_dtype_name(dt), dtype_size(dt), key, (unsigned long long) nbytes);
    }
    struct osc_pt_value * v = new_value(k, OSC_PT_STORAGE);
    if (v) {
        v->dtype         = dt;
        v->data          = data;
        v->storage_numel = (uint64_t) numel;
    }
    return push(k, v);
}

static bool int_tuple(const struct osc_pt_value * v, size_t n) {
    if (!v || v->kind != OSC_PT_TUPLE || v->n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (v->items[i]->kind != OSC_PT_INT) return false;
    return true;
}

// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]).
static enum oscar_status rebuild_tensor(struct pk * k, const struct osc_pt_value * a) {
    if (a->n != 6 && a->n != 7) return fail(k, "_rebuild_tensor_v2 wants 6 or 7 arguments, got %zu", a->n);
    const struct osc_pt_value * s = a->items[0], * off = a->items[1], * size = a->items[2], * stride = a->items[3];
    if (s->kind != OSC_PT_STORAGE || off->kind != OSC_PT_INT || size->kind != OSC_PT_TUPLE ||
        size->n > OSC_PT_MAX_DIMS || !int_tuple(size, size->n) || !int_tuple(stride, size->n) ||
        a->items[4]->kind != OSC_PT_BOOL || a->items[5]->kind != OSC_PT_DICT)
        return fail(k, "_rebuild_tensor_v2 arguments are not (storage, int, size, stride, bool, dict) with at most 8 dims");
    struct osc_pt_value * t = new_value(k, OSC_PT_TENSOR);
    if (!t) return push(k, NULL);
    t->dtype         = s->dtype;
    t->data          = s->data;
    t->storage_numel = s->storage_numel;
    t->ndim          = (int32_t) size->n;
    t->offset        = off->i;
    uint64_t numel = 1, last = 0; // last: the highest element index the tensor reaches
    for (int32_t d = 0; d < t->ndim; d++) {
        t->shape[d]  = size->items[d]->i;
        t->stride[d] = stride->items[d]->i;
        if (t->shape[d] < 0 || t->stride[d] < 0 || (uint64_t) t->shape[d] > PK_MAX_NUMEL ||
            (uint64_t) t->stride[d] > (1ull << 40))
            return fail(k, "tensor has a negative or huge size or stride");
        numel *= (uint64_t) t->shape[d];
        if (numel > PK_MAX_NUMEL) return fail(k, "tensor has more than 2^28 elements");
    }
    for (int32_t d = 0; d < t->ndim && numel > 0; d++) last += (uint64_t) (t->shape[d] - 1) * (uint64_t) t->stride[d];
    if (t->offset < 0 || (uint64_t) t->offset > (1ull << 40) ||
        (numel > 0 && (uint64_t) t->offset + last >= t->storage_numel)) {
        return fail(k, "tensor lies outside its storage: offset %lld + strides reach element %llu of a %llu-element storage",
                    (long long) t->offset, (unsigned long long) ((uint64_t) t->offset + last),
                    (unsigned long long) t->storage_numel);
    }
    return push(k, t);
}

static enum oscar_status op_reduce(struct pk * k) {
    struct osc_pt_value * args = pop(k), * fn = pop(k);
    if (!args || !fn || args->kind != OSC_PT_TUPLE) return fail(k, "REDUCE wants a callable and an argument tuple");
    if (fn->kind != OSC_PT_GLOBAL) return fail(k, "REDUCE calls a %s, not an allowed global", osc_pt_kind_name(fn->kind));
    switch (fn->i) {
        case G_REBUILD_TENSOR: return rebuild_tensor(k, args);
        case G_REBUILD_PARAM: // (tensor, requires_grad, hooks): the tensor itself
            if (args->n < 1 || args->items[0]->kind != OSC_PT_TENSOR)
                return fail(k, "_rebuild_parameter wants a tensor");
            return push(k, args->items[0]);
        case G_ODICT:
            if (args->n != 0) return fail(k, "OrderedDict is only rebuilt empty (then filled by SETITEMS)");
            return push(k, new_value(k, OSC_PT_DICT));
        default: return fail(k, "%s may only appear inside a persistent id", allowed[fn->i].name);
    }
}

static enum oscar_status step(struct pk * k, uint8_t op, bool * stop) {
    enum oscar_status st;
    switch (op) {
        case 0x80: // PROTO
            if ((st = need(k, 1))) return st;
            if (k->p[k->pos] < 2 || k->p[k->pos] > 5) return fail(k, "pickle protocol %d is not 2 to 5", k->p[k->pos]);
            k->pos++;
            return OSCAR_OK;
        case 0x95: // FRAME: an 8-byte length, framing only
            if ((st = need(k, 8))) return st;
            k->pos += 8;
            return OSCAR_OK;
        case '.': *stop = true; return OSCAR_OK;
        case '(':
            if (k->n_marks == PK_MAX_DEPTH) return fail(k, "more than 64 nested MARKs");
            k->marks[k->n_marks++] = k->sp;
            return OSCAR_OK;
        case '0': return pop(k) ? OSCAR_OK : fail(k, "POP on an empty stack");
        case '1':
            if (!k->n_marks) return fail(k, "POP_MARK without a MARK");
            k->sp = k->marks[--k->n_marks];
            return OSCAR_OK;
        case '}': return push(k, new_value(k, OSC_PT_DICT));
        case ']': return push(k, new_value(k, OSC_PT_LIST));
        case ')': return push(k, new_value(k, OSC_PT_TUPLE));
        case 't': return make_tuple(k, true, 0, OSC_PT_TUPLE);
        case 'l': return make_tuple(k, true, 0, OSC_PT_LIST);
        case 0x85: return make_tuple(k, false, 1, OSC_PT_TUPLE);
        case 0x86: return make_tuple(k, false, 2, OSC_PT_TUPLE);
        case 0x87: return make_tuple(k, false, 3, OSC_PT_TUPLE);
        case 'd': return make_dict(k);
        case 's': return fill(k, false, true);
        case 'u': return fill(k, true, true);
        case 'a': return fill(k, false, false);
        case 'e': return fill(k, true, false);
        case 'q': if ((st = need(k, 1))) return st; return memo_put(k, k->p[k->pos++]);
        case 'r': if ((st = need(k, 4))) return st; k->pos += 4; return memo_put(k, rd_le(k->p + k->pos - 4, 4));
        case 0x94: return memo_put(k, k->memo_count);
        case 'h': if ((st = need(k, 1))) return st; return memo_get(k, k->p[k->pos++]);
        case 'j': if ((st = need(k, 4))) return st; k->pos += 4; return memo_get(k, rd_le(k->p + k->pos - 4, 4));
        case 'J': return op_int(k, 4, true);
        case 'K': return op_int(k, 1, false);
        case 'M': return op_int(k, 2, false);
        case 0x8a: return op_long1(k);
        case 'G': return op_binfloat(k);
        case 'X': return op_unicode(k, 4);
        case 0x8c: return op_unicode(k, 1);
        case 'N': return push(k, new_value(k, OSC_PT_NONE));
        case 0x88:
        case 0x89: {
            struct osc_pt_value * v = new_value(k, OSC_PT_BOOL);
            if (v) v->b = op == 0x88;
            return push(k, v);
        }
        case 'c': return op_global(k);
        case 0x93: return op_stack_global(k);
        case 'R': return op_reduce(k);
        case 'Q': return op_persid(k);
        default: {
            return fail(k, "opcode %s (0x%02x) is not allowed in a tensor file", op_name(op), op);
        }
    }
}

enum oscar_status osc_pt_unpickle(const uint8_t * pkl, size_t n, const char * label, osc_pt_storage_fn load,
                                  void * ctx, struct osc_pt_vm ** vm_out, const struct osc_pt_value ** root) {
    struct pk k = { .p = pkl, .n = n, .label = label, .load = load, .ctx = ctx };
    enum oscar_status st = OSCAR_OK;
    bool              stop = false;
    *vm_out = NULL;
    *root   = NULL;
    if (!(k.vm = calloc(1, sizeof *k.vm))) return osc_error(OSCAR_ERR_NOMEM, "out of memory");
    while (st == OSCAR_OK && !stop) {
        if (k.pos >= k.n) {
            k.op_at = k.pos;
            st      = fail(&k, "no STOP opcode (truncated pickle)");
            break;
        }
        k.op_at = k.pos;
        st      = step(&k, k.p[k.pos++], &stop);
    }
    if (st == OSCAR_OK && (k.sp != 1 || k.n_marks)) st = fail(&k, "STOP leaves %zu values (and %d marks) on the stack, not one", k.sp, k.n_marks);
    if (st == OSCAR_OK) {
        *root   = k.stack[0];
        *vm_out = k.vm;
        k.vm    = NULL;
    }
    osc_pt_vm_free(k.vm);
    free(k.stack);
    free(k.memo);
    return st;
}

const char * osc_pt_kind_name(enum osc_pt_kind kind) {
    static const char * const names[] = { "None", "bool", "int", "float", "str", "tuple", "list", "dict", "tensor",
                                          "global", "storage" };
    return (unsigned) kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

const char * osc_pt_dtype_name(enum osc_pt_dtype d) {
    static const char * const names[] = { "float32", "float64", "float16", "bfloat16" };
    return (unsigned) d < sizeof names / sizeof names[0] ? names[d] : "?";
}
