/* runfold.core._staging: the writer's staging hot path in C (DESIGN.md §3; issue 2 goal (a)).
 *
 * Two pure functions, each the compiled twin of Python code that stays the reference and the
 * fallback: `encode_payloads` (canonical.encode_datas: the canonical JSON bytes of payloads, as
 * orjson with OPT_SORT_KEYS writes them) and `stage_lines` (the per-line chain loop of
 * store.ledger.Ledger.stage: checks, line bytes as canonical.splice_line writes them, BLAKE3
 * chain hashes through the `blake3` package). Both answer None whenever an input leaves the
 * small fast subset they handle, so the Python code decides (and names) everything unusual.
 * No I/O, no clock, no global state besides interned attribute names.
 *
 * Return convention of the static helpers: 0 done, 1 "outside the fast subset" (the caller
 * answers None, no exception set), -1 a Python exception is set.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* PyMemberDef, T_OBJECT_EX */
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 126 /* canonical.MAX_DEPTH: the data object is depth 1 */
#define OUTSIDE 1     /* helper result: not in the fast subset */

/* ---- a growable byte buffer ---------------------------------------------------------------- */

typedef struct {
    char *p;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int
buf_init(Buf *b, Py_ssize_t cap)
{
    b->p = PyMem_Malloc((size_t)cap);
    b->len = 0;
    b->cap = cap;
    if (b->p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void
buf_free(Buf *b)
{
    PyMem_Free(b->p);
    b->p = NULL;
}

/* Make room for `extra` more bytes (doubling, so appends are amortised O(1)). */
static int
buf_reserve(Buf *b, Py_ssize_t extra)
{
    if (extra <= b->cap - b->len) {
        return 0;
    }
    if (extra > PY_SSIZE_T_MAX / 2 - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t cap = b->cap * 2;
    if (cap < b->len + extra) {
        cap = b->len + extra;
    }
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int
buf_put(Buf *b, const char *s, Py_ssize_t n)
{
    if (buf_reserve(b, n) < 0) {
        return -1;
    }
    memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

#define BUF_LIT(b, lit) buf_put((b), (lit), (Py_ssize_t)(sizeof(lit) - 1))

/* ---- integers ------------------------------------------------------------------------------ */

/* Decimal digits of `u` as JSON writes them (no sign). */
static int
put_u64(Buf *b, unsigned long long u)
{
    char tmp[24];
    int i = (int)sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + (u % 10));
        u /= 10;
    } while (u != 0);
    return buf_put(b, tmp + i, (Py_ssize_t)sizeof(tmp) - i);
}

static int
put_i64(Buf *b, long long v)
{
    if (v < 0) {
        if (BUF_LIT(b, "-") < 0) {
            return -1;
        }
        /* negate in unsigned arithmetic: -I64_MIN does not fit a long long */
        return put_u64(b, 0ULL - (unsigned long long)v);
    }
    return put_u64(b, (unsigned long long)v);
}

/* An exact int in I64_MIN..U64_MAX (canonical.check_json's range); OUTSIDE beyond it. */
static int
put_int(Buf *b, PyObject *v)
{
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow == 0) {
        return put_i64(b, x);
    }
    if (overflow < 0) {
        return OUTSIDE; /* below I64_MIN */
    }
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return -1;
        }
        PyErr_Clear();
        return OUTSIDE; /* beyond U64_MAX */
    }
    return put_u64(b, u);
}

/* ---- strings ------------------------------------------------------------------------------- */

/* How orjson writes each ASCII code point inside a JSON string: 0 as itself, 'u' as \u00XX with
 * lowercase hex, any other letter as a backslash and that letter. orjson escapes only `"`, `\`
 * and the C0 controls; DEL (0x7f), U+2028/U+2029 and all non-ASCII stay raw UTF-8. */
static const char ESCAPE[128] = {
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'b', 't', 'n', 'u', 'f', 'r', 'u', 'u', /* 0x00 */
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', /* 0x10 */
    0,   0,   '"', 0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   /* 0x20 */
    0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   /* 0x30 */
    0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   /* 0x40 */
    0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   '\\', 0,  0,   0,   /* 0x50 */
    0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   /* 0x60 */
    0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   /* 0x70 */
};

static const char HEX[] = "0123456789abcdef";

/* Bytes one code point takes inside a JSON string; -1 for a surrogate (a lone surrogate is
 * not valid Unicode: check_json refuses it, so the fast path answers None). */
static inline Py_ssize_t
code_point_size(Py_UCS4 c)
{
    if (c < 0x80) {
        return ESCAPE[c] == 0 ? 1 : (ESCAPE[c] == 'u' ? 6 : 2);
    }
    if (c < 0x800) {
        return 2;
    }
    if (c >= 0xD800 && c <= 0xDFFF) {
        return -1;
    }
    return c < 0x10000 ? 3 : 4;
}

/* Write one code point (never a surrogate) at `out`; returns the byte after it. */
static inline char *
write_code_point(char *out, Py_UCS4 c)
{
    if (c < 0x80) {
        char e = ESCAPE[c];
        if (e == 0) {
            *out++ = (char)c;
        }
        else if (e == 'u') {
            memcpy(out, "\\u00", 4);
            out[4] = HEX[c >> 4];
            out[5] = HEX[c & 0xF];
            out += 6;
        }
        else {
            out[0] = '\\';
            out[1] = e;
            out += 2;
        }
    }
    else if (c < 0x800) {
        *out++ = (char)(0xC0 | (c >> 6));
        *out++ = (char)(0x80 | (c & 0x3F));
    }
    else if (c < 0x10000) {
        *out++ = (char)(0xE0 | (c >> 12));
        *out++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *out++ = (char)(0x80 | (c & 0x3F));
    }
    else {
        *out++ = (char)(0xF0 | (c >> 18));
        *out++ = (char)(0x80 | ((c >> 12) & 0x3F));
        *out++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *out++ = (char)(0x80 | (c & 0x3F));
    }
    return out;
}

/* An exact str as a quoted JSON string, escaped as orjson escapes it. An ASCII string that needs
 * no escape is copied whole; any other takes two passes over its code points: the first sizes
 * the output exactly (and finds lone surrogates -> OUTSIDE), the second writes it. Reads the
 * str's own storage, so it never makes (and caches on the str) a UTF-8 copy. */
/* Whether any of the 8 bytes in `w` (all ASCII) is one that needs an escape: below 0x20, `"`
 * or `\`. Classic SWAR tests: (x - 0x01..) & ~x & 0x80.. flags a zero byte, so `"` and `\`
 * are found as zero bytes of w XOR the repeated character; since every byte of w is < 0x80,
 * (w - 0x20..) & ~w & 0x80.. flags exactly the bytes below 0x20. */
static inline int
word_needs_escape(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t q = w ^ (ones * '"'), bs = w ^ (ones * '\\');
    return (((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((bs - ones) & ~bs)) & high ? 1 : 0;
}

/* Whether an ASCII buffer holds no byte that needs an escape (8 bytes per step). */
static int
ascii_plain(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (word_needs_escape(w)) {
            return 0;
        }
    }
    for (; i < n; i++) {
        if (ESCAPE[p[i]] != 0) {
            return 0;
        }
    }
    return 1;
}

static int
put_str(Buf *b, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s) && ascii_plain(data, n)) { /* the common case: copy it whole */
        if (buf_reserve(b, n + 2) < 0) {
            return -1;
        }
        char *out = b->p + b->len;
        out[0] = '"';
        memcpy(out + 1, data, (size_t)n);
        out[n + 1] = '"';
        b->len += n + 2;
        return 0;
    }
    Py_ssize_t size = 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t k = code_point_size(PyUnicode_READ(kind, data, i));
        if (k < 0) {
            return OUTSIDE;
        }
        size += k; /* at most 6 per code point and n < PY_SSIZE_T_MAX / 4: no overflow
                      in practice, and buf_reserve refuses absurd sizes */
    }
    if (buf_reserve(b, size) < 0) {
        return -1;
    }
    char *out = b->p + b->len;
    *out++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        out = write_code_point(out, PyUnicode_READ(kind, data, i));
    }
    *out++ = '"';
    b->len += size;
    return 0;
}

/* ---- JSON values --------------------------------------------------------------------------- */

static int put_value(Buf *b, PyObject *v, int depth);

typedef struct {
    PyObject *key; /* borrowed: no Python code runs while encoding, so the dict cannot change */
    PyObject *value;
} Item;

/* Code point order of two exact strs (what OPT_SORT_KEYS gives: UTF-8 byte order is code point
 * order). PyUnicode_Compare cannot fail on exact strs. */
static int
item_cmp(const void *a, const void *b)
{
    PyObject *x = ((const Item *)a)->key, *y = ((const Item *)b)->key;
    if (PyUnicode_KIND(x) == PyUnicode_1BYTE_KIND && PyUnicode_KIND(y) == PyUnicode_1BYTE_KIND) {
        /* Latin-1 storage: byte order is code point order, the shorter prefix first */
        Py_ssize_t nx = PyUnicode_GET_LENGTH(x), ny = PyUnicode_GET_LENGTH(y);
        int c = memcmp(PyUnicode_1BYTE_DATA(x), PyUnicode_1BYTE_DATA(y), (size_t)(nx < ny ? nx : ny));
        return c != 0 ? c : (nx > ny) - (nx < ny);
    }
    return PyUnicode_Compare(x, y);
}

static void
sort_items(Item *items, Py_ssize_t n)
{
    if (n > 16) {
        qsort(items, (size_t)n, sizeof(Item), item_cmp);
        return;
    }
    for (Py_ssize_t i = 1; i < n; i++) { /* insertion sort: payload objects are small */
        Item x = items[i];
        Py_ssize_t j = i;
        while (j > 0 && item_cmp(&items[j - 1], &x) > 0) {
            items[j] = items[j - 1];
            j--;
        }
        items[j] = x;
    }
}

/* An exact dict with exact str keys, keys sorted. */
static int
put_dict(Buf *b, PyObject *d, int depth)
{
    if (depth > MAX_DEPTH) {
        return OUTSIDE;
    }
    Py_ssize_t n = PyDict_GET_SIZE(d);
    if (n == 0) {
        return BUF_LIT(b, "{}");
    }
    Item stack[16];
    Item *items = stack;
    if (n > 16) {
        items = PyMem_Malloc((size_t)n * sizeof(Item));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    int rc = 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(d, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) {
            rc = OUTSIDE;
            goto done;
        }
        items[i].key = key;
        items[i].value = value;
        i++;
    }
    sort_items(items, n);
    char open = '{';
    for (i = 0; i < n; i++) {
        if ((rc = buf_put(b, i == 0 ? &open : ",", 1)) != 0 || (rc = put_str(b, items[i].key)) != 0 ||
            (rc = BUF_LIT(b, ":")) != 0 || (rc = put_value(b, items[i].value, depth + 1)) != 0) {
            goto done;
        }
    }
    rc = BUF_LIT(b, "}");
done:
    if (items != stack) {
        PyMem_Free(items);
    }
    return rc;
}

/* An exact list or tuple (both are JSON arrays, as orjson writes them). */
static int
put_array(Buf *b, PyObject *seq, int depth)
{
    if (depth > MAX_DEPTH) {
        return OUTSIDE;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int rc;
    if ((rc = BUF_LIT(b, "[")) != 0) {
        return rc;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((i > 0 && (rc = BUF_LIT(b, ",")) != 0) || (rc = put_value(b, items[i], depth + 1)) != 0) {
            return rc;
        }
    }
    return BUF_LIT(b, "]");
}

/* Any value of the fast subset at nesting `depth`; exact types only (a subclass, a float, an
 * orjson.Fragment or anything else is OUTSIDE: the Python path refuses or encodes it). */
static int
put_value(Buf *b, PyObject *v, int depth)
{
    if (PyUnicode_CheckExact(v)) {
        return put_str(b, v);
    }
    if (PyLong_CheckExact(v)) { /* bool is a subclass of int, so not caught here */
        return put_int(b, v);
    }
    if (v == Py_None) {
        return BUF_LIT(b, "null");
    }
    if (v == Py_True) {
        return BUF_LIT(b, "true");
    }
    if (v == Py_False) {
        return BUF_LIT(b, "false");
    }
    if (PyDict_CheckExact(v)) {
        return put_dict(b, v, depth);
    }
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
        return put_array(b, v, depth);
    }
    return OUTSIDE;
}

/* ---- encode_payloads ----------------------------------------------------------------------- */

PyDoc_STRVAR(encode_payloads_doc,
             "encode_payloads(datas: list[dict]) -> list[bytes] | None\n\n"
             "The canonical bytes of each payload (what orjson.dumps(d, option=OPT_SORT_KEYS) gives), "
             "or None as soon as any value leaves the fast subset (exact dict/list/tuple/str/int, "
             "bool, None; ints in I64_MIN..U64_MAX; no lone surrogate; nesting <= MAX_DEPTH). "
             "TypeError when `datas` is not a list.");

static PyObject *
encode_payloads(PyObject *module, PyObject *datas)
{
    if (!PyList_CheckExact(datas)) {
        PyErr_SetString(PyExc_TypeError, "encode_payloads: datas must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(datas);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    Buf b;
    if (buf_init(&b, 1024) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *data = PyList_GET_ITEM(datas, i);
        b.len = 0;
        int rc = PyDict_CheckExact(data) ? put_dict(&b, data, 1) : OUTSIDE;
        if (rc != 0) {
            buf_free(&b);
            Py_DECREF(out); /* frees the bytes made so far; unfilled slots are NULL */
            if (rc < 0) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        PyObject *bytes = PyBytes_FromStringAndSize(b.p, b.len);
        if (bytes == NULL) {
            buf_free(&b);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, bytes); /* steals the reference */
    }
    buf_free(&b);
    return out;
}

/* ---- stage_lines --------------------------------------------------------------------------- */

/* The draft fields stage_lines reads, in this order (FIELD_* index Fields.v and DraftReader). */
enum { FIELD_RUN, FIELD_WHO, FIELD_KIND, FIELD_ADDR, FIELD_IG, FIELD_T, N_FIELDS };
static const char *const FIELD_NAMES[N_FIELDS] = {"run", "who", "kind", "addr", "ig", "t"};
static PyObject *field_names[N_FIELDS]; /* interned at import */
static PyObject *str_update, *str_digest, *str_reset;

/* A NamedTuple instance built as tuple.__new__(cls, items) builds it: the class's tp_alloc (a
 * GC-tracked tuple of n NULL slots), then each slot gets a new reference. */
static PyObject *
new_tuple_of(PyTypeObject *cls, PyObject *const *items, Py_ssize_t n)
{
    PyObject *t = cls->tp_alloc(cls, n);
    if (t == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(t, i, items[i]);
    }
    return t;
}

/* ---- the chain hash ---- */

/* The bound update/digest/reset of the writer's one BLAKE3 hasher (the `blake3` package),
 * looked up once per batch. */
typedef struct {
    PyObject *update, *digest, *reset;
} Hasher;

static void
hasher_clear(Hasher *h)
{
    Py_CLEAR(h->update);
    Py_CLEAR(h->digest);
    Py_CLEAR(h->reset);
}

static int
hasher_init(Hasher *h, PyObject *hasher)
{
    h->update = h->digest = h->reset = NULL;
    if ((h->update = PyObject_GetAttr(hasher, str_update)) == NULL ||
        (h->digest = PyObject_GetAttr(hasher, str_digest)) == NULL ||
        (h->reset = PyObject_GetAttr(hasher, str_reset)) == NULL) {
        hasher_clear(h);
        return -1;
    }
    return 0;
}

/* BLAKE3 of `raw` as 64 lowercase hex: update(raw), digest(), reset(). The hasher is reset
 * even when update or digest raised (the exception is kept), so a failed batch leaves no
 * bytes in it that would corrupt the next batch's hashes. */
static PyObject *
chain_hash_hex(const Hasher *h, PyObject *raw)
{
    PyObject *digest = NULL;
    PyObject *r = PyObject_CallOneArg(h->update, raw);
    if (r != NULL) {
        Py_DECREF(r);
        digest = PyObject_CallNoArgs(h->digest);
    }
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb); /* keep update's/digest's error over reset */
    r = PyObject_CallNoArgs(h->reset);
    if (exc_type != NULL) {
        Py_XDECREF(r);
        PyErr_Restore(exc_type, exc_value, exc_tb);
        return NULL;
    }
    if (r == NULL) {
        Py_XDECREF(digest);
        return NULL;
    }
    Py_DECREF(r);
    if (!PyBytes_CheckExact(digest) || PyBytes_GET_SIZE(digest) != 32) {
        Py_DECREF(digest);
        PyErr_SetString(PyExc_TypeError, "stage_lines: the hasher's digest() must give 32 bytes");
        return NULL;
    }
    PyObject *hex = PyUnicode_New(64, 127);
    if (hex == NULL) {
        Py_DECREF(digest);
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(digest);
    Py_UCS1 *x = PyUnicode_1BYTE_DATA(hex);
    for (int i = 0; i < 32; i++) {
        x[2 * i] = (Py_UCS1)HEX[d[i] >> 4];
        x[2 * i + 1] = (Py_UCS1)HEX[d[i] & 0xF];
    }
    Py_DECREF(digest);
    return hex;
}

/* ---- reading drafts ---- */

/* Where a draft class keeps each field when it is a slots class (Draft is a frozen slots
 * dataclass): the byte offset of its slot, so a field is one load instead of a generic
 * attribute lookup (~400 instructions each). Valid only for drafts of exactly `type`, whose
 * attribute lookup is the generic one and whose fields are all object slots (a slot's member
 * descriptor is a data descriptor: the generic lookup would find it first, too). `type` NULL:
 * read every field with PyObject_GetAttr. */
typedef struct {
    PyTypeObject *type; /* borrowed from the first draft (the drafts sequence keeps it alive) */
    Py_ssize_t offset[N_FIELDS];
} DraftReader;

static int
reader_init(DraftReader *r, PyObject *first)
{
    PyTypeObject *type = Py_TYPE(first);
    r->type = NULL;
    if (type->tp_getattro != PyObject_GenericGetAttr) {
        return 0;
    }
    for (int k = 0; k < N_FIELDS; k++) {
        PyObject *descr = PyObject_GetAttr((PyObject *)type, field_names[k]);
        if (descr == NULL) {
            PyErr_Clear(); /* no such class attribute: PyObject_GetAttr on each draft decides */
            return 0;
        }
        int slot = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                   ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
                   PyType_IsSubtype(type, PyDescr_TYPE(descr));
        if (slot) {
            r->offset[k] = ((PyMemberDescrObject *)descr)->d_member->offset;
        }
        Py_DECREF(descr);
        if (!slot) {
            return 0;
        }
    }
    r->type = type;
    return 0;
}

/* One draft's fields as new references. A slot never set raises AttributeError, as the
 * generic lookup would. */
static int
read_fields(const DraftReader *r, PyObject *d, PyObject **v)
{
    for (int k = 0; k < N_FIELDS; k++) {
        if (r->type != NULL && Py_IS_TYPE(d, r->type)) {
            v[k] = *(PyObject **)((char *)d + r->offset[k]);
            if (v[k] == NULL) {
                PyErr_SetObject(PyExc_AttributeError, field_names[k]);
                return -1;
            }
            Py_INCREF(v[k]);
        }
        else if ((v[k] = PyObject_GetAttr(d, field_names[k])) == NULL) {
            return -1;
        }
    }
    return 0;
}

static void
fields_clear(PyObject **v)
{
    for (int k = 0; k < N_FIELDS; k++) {
        Py_CLEAR(v[k]);
    }
}

/* The ledger's fast checks of Ledger.stage on fields read: run a known-good run id, who a
 * non-empty str, kind a known kind, addr None or a known-good address, ig a bool, t None or an
 * int in i64 (then stored in *t). Exact strs only (so the bytes can be escaped here). OUTSIDE
 * when any check fails: the Python loop then checks the draft and names its fault. */
static int
check_fields(PyObject *const *v, PyObject *runs_ok, PyObject *addrs_ok, PyObject *known, long long *t)
{
    PyObject *run = v[FIELD_RUN], *who = v[FIELD_WHO], *kind = v[FIELD_KIND], *addr = v[FIELD_ADDR];
    if (v[FIELD_T] != Py_None) {
        if (!PyLong_CheckExact(v[FIELD_T])) {
            return OUTSIDE;
        }
        int overflow;
        *t = PyLong_AsLongLongAndOverflow(v[FIELD_T], &overflow);
        if (*t == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow != 0) {
            return OUTSIDE;
        }
    }
    if (!PyUnicode_CheckExact(run) || !PyUnicode_CheckExact(who) || PyUnicode_GET_LENGTH(who) == 0 ||
        !PyUnicode_CheckExact(kind) || (addr != Py_None && !PyUnicode_CheckExact(addr)) ||
        (v[FIELD_IG] != Py_True && v[FIELD_IG] != Py_False)) {
        return OUTSIDE;
    }
    /* PySet_Contains of an exact str cannot raise: 1 is found, 0 is not */
    if (PySet_Contains(runs_ok, run) != 1 || PySet_Contains(known, kind) != 1 ||
        (addr != Py_None && PySet_Contains(addrs_ok, addr) != 1)) {
        return OUTSIDE;
    }
    return 0;
}

/* ---- line bytes ---- */

/* A line's canonical bytes, field for field as canonical.splice_line writes them:
 * {"v":V,"run":R,"seq":S,"prev":P,"t":T,"who":W[,"addr":A],"kind":K,"data":DATA[,"ig":true]} */
static int
put_line(Buf *b, long long v, PyObject *const *f, long long seq, PyObject *prev, long long t, PyObject *data)
{
    int rc;
    if ((rc = BUF_LIT(b, "{\"v\":")) || (rc = put_i64(b, v)) || (rc = BUF_LIT(b, ",\"run\":")) ||
        (rc = put_str(b, f[FIELD_RUN])) || (rc = BUF_LIT(b, ",\"seq\":")) || (rc = put_i64(b, seq)) ||
        (rc = BUF_LIT(b, ",\"prev\":")) || (rc = put_str(b, prev)) || (rc = BUF_LIT(b, ",\"t\":")) ||
        (rc = put_i64(b, t)) || (rc = BUF_LIT(b, ",\"who\":")) || (rc = put_str(b, f[FIELD_WHO]))) {
        return rc;
    }
    if (f[FIELD_ADDR] != Py_None && ((rc = BUF_LIT(b, ",\"addr\":")) || (rc = put_str(b, f[FIELD_ADDR])))) {
        return rc;
    }
    if ((rc = BUF_LIT(b, ",\"kind\":")) || (rc = put_str(b, f[FIELD_KIND])) || (rc = BUF_LIT(b, ",\"data\":")) ||
        (rc = buf_put(b, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data)))) {
        return rc;
    }
    if (f[FIELD_IG] == Py_True && (rc = BUF_LIT(b, ",\"ig\":true"))) {
        return rc;
    }
    return BUF_LIT(b, "}");
}

/* ---- stage_lines ---- */

/* Exact int argument as a long long; TypeError otherwise, OUTSIDE when it does not fit. */
static int
arg_i64(PyObject *o, const char *name, long long *out)
{
    if (!PyLong_CheckExact(o)) {
        PyErr_Format(PyExc_TypeError, "stage_lines: %s must be an int", name);
        return -1;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (*out == -1 && PyErr_Occurred()) {
        return -1;
    }
    return overflow ? OUTSIDE : 0;
}

static int
arg_tuple_type(PyObject *o, const char *name)
{
    if (!PyType_Check(o) || !PyType_IsSubtype((PyTypeObject *)o, &PyTuple_Type)) {
        PyErr_Format(PyExc_TypeError, "stage_lines: %s must be a tuple subclass", name);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(stage_lines_doc,
             "stage_lines(drafts, datas, encoded, seq, head, clock, version, runs_ok, addrs_ok, known,\n"
             "            envelope_cls, record_cls, hasher) -> list[Record] | None\n\n"
             "The chain loop of Ledger.stage: for each draft i (attributes run, who, kind, addr, ig, t), "
             "Envelope(version, run, seq + i, prev, t or clock, who, kind, datas[i], addr, ig), its line "
             "bytes (canonical.splice_line with encoded[i]) and BLAKE3 hex through `hasher` (a blake3.blake3 "
             "in its reset state: update, digest, reset per line); each line's hash is the next line's prev, "
             "starting from `head`. Returns the Records, or None when any draft fails a fast check (unknown "
             "run/addr/kind, empty who, non-bool ig, t outside i64, non-str fields): the caller then runs its "
             "Python loop. Reads the caches, never changes them. Raises TypeError for malformed arguments "
             "and whatever a draft's attributes or the hasher raise.");

static PyObject *
stage_lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "stage_lines takes 13 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *drafts_arg = args[0], *datas = args[1], *encoded = args[2], *head = args[4];
    PyObject *clock = args[5], *runs_ok = args[7], *addrs_ok = args[8], *known = args[9];
    PyObject *envelope_cls = args[10], *record_cls = args[11];
    long long seq, clock_ms, version;
    int rc;
    if ((rc = arg_i64(args[3], "seq", &seq)) || (rc = arg_i64(clock, "clock", &clock_ms)) ||
        (rc = arg_i64(args[6], "version", &version))) {
        if (rc < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (arg_tuple_type(envelope_cls, "envelope_cls") < 0 || arg_tuple_type(record_cls, "record_cls") < 0) {
        return NULL;
    }
    if (!PyUnicode_CheckExact(head) || !PyList_CheckExact(datas) || !PyList_CheckExact(encoded) ||
        !PyAnySet_Check(runs_ok) || !PyAnySet_Check(addrs_ok) || !PyAnySet_Check(known)) {
        PyErr_SetString(PyExc_TypeError,
                        "stage_lines: head must be a str, datas and encoded lists, the caches and known sets");
        return NULL;
    }
    PyObject *drafts = PySequence_Fast(drafts_arg, "stage_lines: drafts must be a sequence");
    if (drafts == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(drafts);
    if (PyList_GET_SIZE(datas) != n || PyList_GET_SIZE(encoded) != n) {
        Py_DECREF(drafts);
        PyErr_SetString(PyExc_TypeError, "stage_lines: drafts, datas and encoded differ in length");
        return NULL;
    }
    if (n == 0 || seq > LLONG_MAX - n) {
        Py_DECREF(drafts);
        return n == 0 ? PyList_New(0) : Py_NewRef(Py_None);
    }
    DraftReader reader;
    Hasher hasher;
    if (reader_init(&reader, PySequence_Fast_GET_ITEM(drafts, 0)) < 0 || hasher_init(&hasher, args[12]) < 0) {
        Py_DECREF(drafts);
        return NULL;
    }
    PyObject *records = PyList_New(n);
    Buf b;
    if (records == NULL || buf_init(&b, 1024) < 0) {
        Py_XDECREF(records);
        hasher_clear(&hasher);
        Py_DECREF(drafts);
        return NULL;
    }
    PyObject *prev = Py_NewRef(head); /* owned: the previous line's hash */
    PyObject *f[N_FIELDS] = {NULL};   /* owned: this draft's fields */
    PyObject *seq_obj = NULL, *raw = NULL, *hash = NULL, *env = NULL;
    for (Py_ssize_t i = 0; i < n; i++, seq++) {
        long long t = clock_ms;
        PyObject *data_bytes = PyList_GET_ITEM(encoded, i);
        if (!PyBytes_CheckExact(data_bytes)) {
            PyErr_SetString(PyExc_TypeError, "stage_lines: encoded must hold bytes");
            goto fail;
        }
        if (read_fields(&reader, PySequence_Fast_GET_ITEM(drafts, i), f) < 0 ||
            (rc = check_fields(f, runs_ok, addrs_ok, known, &t)) != 0) {
            goto fail; /* an exception, or OUTSIDE: the Python loop checks the drafts */
        }
        b.len = 0;
        if ((rc = put_line(&b, version, f, seq, prev, t, data_bytes)) != 0) {
            goto fail; /* an exception, or OUTSIDE: a lone surrogate in a str field */
        }
        if ((raw = PyBytes_FromStringAndSize(b.p, b.len)) == NULL || (hash = chain_hash_hex(&hasher, raw)) == NULL ||
            (seq_obj = PyLong_FromLongLong(seq)) == NULL) {
            goto fail;
        }
        PyObject *t_obj = f[FIELD_T] == Py_None ? clock : f[FIELD_T];
        PyObject *env_items[10] = {args[6], f[FIELD_RUN], seq_obj,   prev, t_obj, f[FIELD_WHO], f[FIELD_KIND],
                                   PyList_GET_ITEM(datas, i), f[FIELD_ADDR], f[FIELD_IG]};
        if ((env = new_tuple_of((PyTypeObject *)envelope_cls, env_items, 10)) == NULL) {
            goto fail;
        }
        PyObject *rec_items[3] = {env, raw, hash};
        PyObject *rec = new_tuple_of((PyTypeObject *)record_cls, rec_items, 3);
        if (rec == NULL) {
            goto fail;
        }
        PyList_SET_ITEM(records, i, rec); /* steals rec */
        Py_CLEAR(env);
        Py_CLEAR(raw);
        Py_CLEAR(seq_obj);
        Py_SETREF(prev, hash); /* this line's hash (owned) is the next line's prev */
        hash = NULL;
        fields_clear(f);
    }
    Py_DECREF(prev);
    Py_DECREF(drafts);
    hasher_clear(&hasher);
    buf_free(&b);
    return records;

fail: /* an exception is set, or a draft is OUTSIDE the fast path (answer None) */
    fields_clear(f);
    Py_XDECREF(env);
    Py_XDECREF(raw);
    Py_XDECREF(hash);
    Py_XDECREF(seq_obj);
    Py_DECREF(prev);
    Py_DECREF(drafts);
    Py_DECREF(records); /* unfilled slots are NULL */
    hasher_clear(&hasher);
    buf_free(&b);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- the module ---------------------------------------------------------------------------- */

static PyMethodDef staging_methods[] = {
    {"encode_payloads", (PyCFunction)encode_payloads, METH_O, encode_payloads_doc},
    {"stage_lines", (PyCFunction)(void (*)(void))stage_lines, METH_FASTCALL, stage_lines_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef staging_module = {
    PyModuleDef_HEAD_INIT,
    "runfold.core._staging",
    "The writer's staging hot path in C: canonical payload bytes and the chain loop of "
    "Ledger.stage (DESIGN.md §3). Pure computation; the Python code in runfold.core.canonical "
    "and runfold.store.ledger is the reference and the fallback.",
    -1,
    staging_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__staging(void)
{
    /* interned once for the process (kept: the module is never unloaded) */
    for (int k = 0; k < N_FIELDS; k++) {
        if ((field_names[k] = PyUnicode_InternFromString(FIELD_NAMES[k])) == NULL) {
            return NULL;
        }
    }
    if ((str_update = PyUnicode_InternFromString("update")) == NULL ||
        (str_digest = PyUnicode_InternFromString("digest")) == NULL ||
        (str_reset = PyUnicode_InternFromString("reset")) == NULL) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&staging_module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
