/*
 * _npy_scan: the npy headers of many files of one directory, read in C with the GIL released, and
 * their tensor file names parsed.
 *
 * A metadata ingest reads one small block of every tensor file (ingest/readers/leaf_scan.py); in Python
 * that is ~9 µs of CPU a file (os.open/fstat/read/fstat/close and the parse), here ~2 µs (the system
 * calls). ingest/formats/npy_header.py (read_npy_header + stored_as) defines the rules and stays the
 * reference: this module follows it step by step, and wherever following it exactly would take more
 * than a plain header (any byte >= 0x80 in the header text, a header its fast pattern does not match,
 * a descr outside the table of plain dtypes, a name that is empty or holds '/' or NUL, a directory that
 * cannot be opened) it answers DEFER, and the caller asks the Python code. So it never accepts a file
 * the Python rejects nor rejects one it accepts (tests/ingest/formats/test_npy_scan.py).
 *
 *   table(entries)   entries: a sequence of (descr: bytes, itemsize: int, is_float16: bool), the plain
 *                    descrs (npy_header._PLAIN_DTYPES and the MindSpore ones); index i names entry i,
 *                    index len(entries) names float32 (a float16 header over twice its bytes: stored_as).
 *   scan(dir, names) -> (status, stored, data_offset, nbytes, file_size, shape_offsets, dims)
 *       status        bytes, one a name: OK (0), IRREGULAR (1: the Python raises NpyHeaderError or
 *                     OSError), DEFER (2: ask the Python)
 *       the rest      for the OK files only, in order, as the buffers of Arrow arrays: stored dtype
 *                     index (int32), data offset, data bytes (stored_as), file size (int64), the shape
 *                     as a list<int64> column (int32 offsets, int64 values). *
 * It also parses tensor file names (names(), further down) as npy_name.parse_tensor_name does, leaving
 * to it every name it is not sure of, for the same per-file loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif
#ifndef O_PATH
#define O_PATH O_RDONLY
#endif

enum { ST_OK = 0, ST_IRREGULAR = 1, ST_DEFER = 2 };

#define READ_SIZE 512                /* npy_header._READ_SIZE */
#define MAX_HEADER_BYTES (1 << 20)   /* npy_header.MAX_HEADER_BYTES */
#define MAX_DESCR 31
#define MAX_ENTRIES 256

typedef struct {
    char descr[MAX_DESCR + 1];
    size_t len;
    int64_t itemsize;
    int is_float16;
} Entry;

static Entry entries[MAX_ENTRIES];
static int n_entries = -1; /* -1: table() not called */

/* A growable byte buffer (C heap: filled with the GIL released). */
typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *p, size_t n) {
    if (buf_reserve(b, n)) return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* os.read: one read(2), retried on EINTR (PEP 475). */
static ssize_t read_once(int fd, char *p, size_t n) {
    ssize_t got;
    do {
        got = read(fd, p, n);
    } while (got < 0 && errno == EINTR);
    return got;
}

static int fstat_once(int fd, struct stat *st) {
    int rc;
    do {
        rc = fstat(fd, st);
    } while (rc < 0 && errno == EINTR);
    return rc;
}

static int is_space(unsigned char c) { /* Python's \s on ASCII */
    return (c >= 9 && c <= 13) || (c >= 28 && c <= 32);
}

static int lookup(const char *descr, size_t len, int *last) {
    if (*last >= 0 && entries[*last].len == len && memcmp(entries[*last].descr, descr, len) == 0)
        return *last;
    for (int i = 0; i < n_entries; i++)
        if (entries[i].len == len && memcmp(entries[i].descr, descr, len) == 0) return *last = i;
    return -1;
}

#define EXPECT(lit)                                                   \
    do {                                                              \
        size_t n_ = sizeof(lit) - 1;                                  \
        if ((size_t)(end - p) < n_ || memcmp(p, lit, n_) != 0) return ST_DEFER; \
        p += n_;                                                      \
    } while (0)

typedef struct {
    int entry;
    int64_t nbytes;   /* itemsize * prod(shape), the header's promise */
    int overflow;     /* ... exceeds int64 (no file holds it) */
    size_t first_dim; /* where this header's dims start in the dims buffer */
} Parsed;

/* The header text (ASCII) by npy_header._FAST; the dims appended to `dims`. ST_DEFER where the
 * pattern does not match or the descr is not in the table, ST_IRREGULAR where a dim is out of range
 * (parse_uint), ST_OK otherwise. */
static int parse_text(const char *p, const char *end, Buf *dims, Parsed *out, int *last) {
    EXPECT("{'descr': '");
    const char *d0 = p;
    while (p < end && *p != '\'') p++;
    if (p == d0 || p == end) return ST_DEFER;
    const char *d1 = p;
    EXPECT("', 'fortran_order': ");
    if ((size_t)(end - p) >= 5 && memcmp(p, "False", 5) == 0)
        p += 5;
    else if ((size_t)(end - p) >= 4 && memcmp(p, "True", 4) == 0)
        p += 4;
    else
        return ST_DEFER;
    EXPECT(", 'shape': (");
    /* (?:[0-9]+, ?)*[0-9]*\) */
    int bad_dim = 0, zero = 0, overflow = 0;
    uint64_t prod = 1;
    for (;;) {
        const char *s = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        size_t n = (size_t)(p - s);
        if (p == end) return ST_DEFER;
        if (*p == ',') {
            if (n == 0) return ST_DEFER;
        } else if (*p != ')') {
            return ST_DEFER;
        }
        if (n) { /* parse_uint: at most 19 digits, at most INT64_MAX */
            if (n > 19) {
                bad_dim = 1;
            } else {
                uint64_t v = 0;
                for (size_t i = 0; i < n; i++) v = v * 10 + (uint64_t)(s[i] - '0');
                if (v > (uint64_t)INT64_MAX) {
                    bad_dim = 1;
                } else {
                    int64_t d = (int64_t)v;
                    if (buf_put(dims, &d, sizeof d)) return -1;
                    if (v == 0) zero = 1;
                    else if (!overflow && prod > (uint64_t)INT64_MAX / v) overflow = 1;
                    else if (!overflow) prod *= v;
                }
            }
        }
        if (*p == ')') {
            p++;
            break;
        }
        p++; /* ',' */
        if (p < end && *p == ' ') p++;
    }
    EXPECT(", }");
    while (p < end && is_space((unsigned char)*p)) p++;
    if (p != end) return ST_DEFER;
    int e = lookup(d0, (size_t)(d1 - d0), last);
    if (e < 0) return ST_DEFER; /* the Python asks numpy */
    if (bad_dim) return ST_IRREGULAR;
    int64_t itemsize = entries[e].itemsize;
    out->entry = e;
    out->overflow = 0;
    if (zero) {
        out->nbytes = 0;
    } else if (overflow || (itemsize && prod > (uint64_t)INT64_MAX / (uint64_t)itemsize)) {
        out->overflow = 1;
        out->nbytes = 0;
    } else {
        out->nbytes = (int64_t)prod * itemsize;
    }
    return ST_OK;
}

typedef struct {
    Buf stored, offset, nbytes, size, shape_offsets, dims;
    Buf block; /* the file's first bytes */
} Out;

/* One file, as read_npy_header then stored_as. */
static int scan_one(int dfd, const char *name, Out *o, int *last) {
    int fd;
    do {
        fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ST_IRREGULAR;
    int status = ST_IRREGULAR;
    struct stat st;
    size_t len = 0;
    int64_t size = 0;
    if (fstat_once(fd, &st) < 0 || !S_ISREG(st.st_mode)) goto close;
    if (buf_reserve(&o->block, READ_SIZE)) goto oom_open;
    ssize_t got = read_once(fd, o->block.data, READ_SIZE);
    if (got < 0) goto close;
    len = (size_t)got;
    const unsigned char *b = (const unsigned char *)o->block.data;
    if (len >= 12 && memcmp(b, "\x93NUMPY", 6) == 0) {
        uint64_t end;
        if (b[6] == 1)
            end = 10 + ((uint64_t)b[8] | (uint64_t)b[9] << 8);
        else if (b[6] == 2 || b[6] == 3)
            end = 12 + ((uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24);
        else
            goto close; /* unsupported npy version */
        if (end > len) {
            uint64_t rest = end - len;
            if (rest > MAX_HEADER_BYTES) goto close; /* implausible */
            if (buf_reserve(&o->block, len + (size_t)rest)) goto oom_open;
            got = read_once(fd, o->block.data + len, (size_t)rest);
            if (got < 0) goto close;
            len += (size_t)got;
        }
    }
    if (fstat_once(fd, &st) < 0) goto close;
    size = (int64_t)st.st_size;
    status = ST_OK;
close:
    if (close(fd) < 0) status = ST_IRREGULAR; /* os.close raises */
    if (status != ST_OK) return status;

    /* parse_header_block */
    b = (const unsigned char *)o->block.data;
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) return ST_IRREGULAR;
    size_t start, end;
    if (b[6] == 1) {
        start = 10;
        end = 10 + ((size_t)b[8] | (size_t)b[9] << 8);
    } else if (b[6] == 2 || b[6] == 3) {
        if (len < 12) return ST_IRREGULAR;
        start = 12;
        end = 12 + ((size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24);
    } else {
        return ST_IRREGULAR;
    }
    if (len < end) return ST_IRREGULAR; /* truncated npy header */
    for (size_t i = start; i < end; i++)
        if (b[i] >= 0x80) return ST_DEFER; /* latin1 / UTF-8 text: the Python decodes it */
    size_t first_dim = o->dims.len;
    Parsed h;
    status = parse_text((const char *)b + start, (const char *)b + end, &o->dims, &h, last);
    if (status < 0) goto oom;
    if (status != ST_OK) {
        o->dims.len = first_dim;
        return status;
    }
    /* the header's promise against the file size */
    if (h.overflow || (int64_t)end > INT64_MAX - h.nbytes || size < (int64_t)end + h.nbytes) {
        o->dims.len = first_dim;
        return ST_IRREGULAR;
    }
    /* stored_as */
    int32_t stored = h.entry;
    int64_t nbytes = h.nbytes;
    int64_t data = size - (int64_t)end;
    if (entries[h.entry].is_float16 && nbytes > 0 && data % 2 == 0 && data / 2 == nbytes) {
        stored = n_entries;
        nbytes *= 2;
    }
    int64_t offset = (int64_t)end;
    if (o->dims.len / sizeof(int64_t) > INT32_MAX) { /* past Arrow's int32 list offsets */
        o->dims.len = first_dim;
        return ST_DEFER;
    }
    int32_t shape_end = (int32_t)(o->dims.len / sizeof(int64_t));
    if (buf_put(&o->stored, &stored, sizeof stored) || buf_put(&o->offset, &offset, sizeof offset) ||
        buf_put(&o->nbytes, &nbytes, sizeof nbytes) || buf_put(&o->size, &size, sizeof size) ||
        buf_put(&o->shape_offsets, &shape_end, sizeof shape_end))
        goto oom;
    return ST_OK;
oom_open:
    close(fd);
oom:
    return -1;
}

static PyObject *npy_table(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "table() takes a sequence of (descr, itemsize, is_float16)");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_ENTRIES) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "at most %d descrs", MAX_ENTRIES);
    }
    Entry fresh[MAX_ENTRIES];
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *descr;
        Py_ssize_t len;
        long long itemsize;
        int half;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "y#Lp", &descr, &len, &itemsize, &half)) {
            Py_DECREF(seq);
            return NULL;
        }
        if (len < 1 || len > MAX_DESCR || itemsize < 0) {
            Py_DECREF(seq);
            return PyErr_Format(PyExc_ValueError, "bad table entry %zd", i);
        }
        memcpy(fresh[i].descr, descr, (size_t)len);
        fresh[i].descr[len] = 0;
        fresh[i].len = (size_t)len;
        fresh[i].itemsize = itemsize;
        fresh[i].is_float16 = half;
    }
    Py_DECREF(seq);
    memcpy(entries, fresh, sizeof(Entry) * (size_t)n);
    n_entries = (int)n;
    Py_RETURN_NONE;
}

static void out_free(Out *o) {
    Buf *all[] = {&o->stored, &o->offset, &o->nbytes, &o->size, &o->shape_offsets, &o->dims, &o->block};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

static PyObject *as_bytes(Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

static PyObject *npy_scan(PyObject *self, PyObject *args) {
    PyObject *dir_obj = NULL, *names_obj;
    if (!PyArg_ParseTuple(args, "O&O:scan", PyUnicode_FSConverter, &dir_obj, &names_obj)) return NULL;
    if (n_entries < 0) {
        Py_DECREF(dir_obj);
        PyErr_SetString(PyExc_RuntimeError, "_npy_scan.table() was not called");
        return NULL;
    }
    PyObject *names = PySequence_Fast(names_obj, "scan() takes a sequence of file names");
    if (!names) {
        Py_DECREF(dir_obj);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(names);
    PyObject **encoded = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    char *status = PyMem_Malloc((size_t)n + 1);
    PyObject *result = NULL;
    Out o;
    memset(&o, 0, sizeof o);
    if (!encoded || !status) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* os.fsencode: str names with surrogateescape */
        PyObject *name = PySequence_Fast_GET_ITEM(names, i);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "scan() takes file names as str");
            goto done;
        }
        encoded[i] = PyUnicode_EncodeFSDefault(name);
        if (!encoded[i]) goto done;
    }
    int32_t zero = 0;
    if (buf_put(&o.shape_offsets, &zero, sizeof zero)) {
        PyErr_NoMemory();
        goto done;
    }
    const char *dir = PyBytes_AS_STRING(dir_obj);
    int dir_ok = (Py_ssize_t)strlen(dir) == PyBytes_GET_SIZE(dir_obj);
    int failed = 0, last = -1;
    Py_BEGIN_ALLOW_THREADS
    int dfd = -1;
    if (dir_ok) { /* O_PATH: openat needs search permission on the directory, as open(dir/name) does */
        do {
            dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        } while (dfd < 0 && errno == EINTR);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name = PyBytes_AS_STRING(encoded[i]);
        size_t len = (size_t)PyBytes_GET_SIZE(encoded[i]);
        if (dfd < 0 || len == 0 || strlen(name) != len || memchr(name, '/', len)) {
            status[i] = ST_DEFER;
            continue;
        }
        int st = scan_one(dfd, name, &o, &last);
        if (st < 0) {
            failed = 1;
            break;
        }
        status[i] = (char)st;
    }
    if (dfd >= 0) close(dfd);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("(y#NNNNNN)", status, n, as_bytes(&o.stored), as_bytes(&o.offset),
                           as_bytes(&o.nbytes), as_bytes(&o.size), as_bytes(&o.shape_offsets),
                           as_bytes(&o.dims));
done:
    if (encoded)
        for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(encoded[i]);
    PyMem_Free(encoded);
    PyMem_Free(status);
    out_free(&o);
    Py_DECREF(names);
    Py_DECREF(dir_obj);
    return result;
}

/* -- tensor file names ----------------------------------------------------------------------------
 * names(keys) -> list: per key, the fields ingest.formats.mindspore.npy_name.parse_tensor_name gives,
 * as a plain tuple in TensorName's order, or None where it is not sure to (a non-ASCII name, a name
 * that fails, a number too long for the quick check): the caller asks parse_tensor_name then, which
 * also says why a name fails. tokens(seq) gives it DTYPE_TOKENS (lowercase). */

#define MAX_TOKENS 64
static PyObject *tokens[MAX_TOKENS];
static int n_tokens = -1;
static PyObject *s_input, *s_output, *s_era24, *s_era23, *s_era13;

static PyObject *npy_tokens(PyObject *self, PyObject *arg) {
    (void)self;
    PyObject *seq = PySequence_Fast(arg, "tokens() takes a sequence of str");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_TOKENS) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "at most %d tokens", MAX_TOKENS);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyUnicode_Check(t) || !PyUnicode_IS_ASCII(t) || PyUnicode_GET_LENGTH(t) == 0) {
            Py_DECREF(seq);
            return PyErr_Format(PyExc_ValueError, "bad token %zd", i);
        }
    }
    for (int i = 0; i < n_tokens; i++) Py_CLEAR(tokens[i]);
    for (Py_ssize_t i = 0; i < n; i++) {
        tokens[i] = PySequence_Fast_GET_ITEM(seq, i);
        Py_INCREF(tokens[i]);
    }
    n_tokens = (int)n;
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

/* The lowercase token `t` (ASCII, any case) is, or NULL. */
static PyObject *token_of(const char *t, size_t len) {
    for (int i = 0; i < n_tokens; i++) {
        if ((size_t)PyUnicode_GET_LENGTH(tokens[i]) != len) continue;
        const char *k = (const char *)PyUnicode_DATA(tokens[i]);
        size_t j = 0;
        while (j < len && (t[j] >= 'A' && t[j] <= 'Z' ? t[j] + 32 : t[j]) == k[j]) j++;
        if (j == len) return tokens[i];
    }
    return NULL;
}

static int all_digits(const char *p, size_t n) {
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9') return 0;
    return 1;
}

static long long digits_value(const char *p, size_t n) { /* n <= 18 */
    long long v = 0;
    for (size_t i = 0; i < n; i++) v = v * 10 + (p[i] - '0');
    return v;
}

static int starts_with(const char *p, size_t n, const char *lit) {
    size_t k = strlen(lit);
    return n >= k && memcmp(p, lit, k) == 0;
}

/* One name: a new tuple, Py_None (new reference) where parse_tensor_name must decide, NULL on error. */
static PyObject *parse_name(PyObject *key) {
    if (!PyUnicode_Check(key) || !PyUnicode_IS_ASCII(key)) Py_RETURN_NONE;
    const char *name = (const char *)PyUnicode_DATA(key);
    size_t len = (size_t)PyUnicode_GET_LENGTH(key);
    if (len < 4 || memcmp(name + len - 4, ".npy", 4) != 0) Py_RETURN_NONE;
    size_t end = len - 4;
    /* the fields from the right: up to 7 dots (dtype, fmt, slot, io, ts, stream, task) */
    const char *f[7];
    size_t flen[7];
    int nf = 0;
    size_t stop = end;
    for (size_t i = end; i > 0 && nf < 7; i--) {
        if (name[i - 1] == '.') {
            f[nf] = name + i;
            flen[nf] = stop - i;
            nf++;
            stop = i - 1;
        }
    }
    /* parts[-1..-7] are f[0..6]; `stop` ends what is left of them. Count all the dots of the stem. */
    size_t dots = 0;
    for (size_t i = 0; i < end; i++) dots += name[i] == '.';
    size_t parts = dots + 1;
    PyObject *dtype = NULL;
    int k = 0; /* f[k] is the format */
    if (parts >= 9) {
        dtype = token_of(f[0], flen[0]);
        if (dtype) {
            k = 1;
            parts--;
        }
    }
    if (parts < 8) Py_RETURN_NONE;
    const char *fmt = f[k], *slot = f[k + 1], *io = f[k + 2], *ts = f[k + 3], *stream = f[k + 4],
               *task = f[k + 5];
    size_t lfmt = flen[k], lslot = flen[k + 1], lio = flen[k + 2], lts = flen[k + 3], lstream = flen[k + 4],
           ltask = flen[k + 5];
    PyObject *io_obj;
    if (lio == 6 && memcmp(io, "output", 6) == 0)
        io_obj = s_output;
    else if (lio == 5 && memcmp(io, "input", 5) == 0)
        io_obj = s_input;
    else
        Py_RETURN_NONE;
    if (!lfmt || !all_digits(slot, lslot) || !all_digits(ts, lts) || !all_digits(stream, lstream) ||
        !all_digits(task, ltask))
        Py_RETURN_NONE;
    if (lslot > 9 || lts > 18 || lstream > 18 || ltask > 18) Py_RETURN_NONE; /* _check_ranges decides */
    /* op_type = parts[0]; op_name = parts[1 : -6] joined: from after the first dot to before `task` */
    const char *first_dot = memchr(name, '.', end);
    const char *op_type = name;
    size_t lop_type = (size_t)(first_dot - name);
    const char *op_name = first_dot + 1;
    if (task - 1 < op_name) Py_RETURN_NONE; /* (not reached: at least 8 parts) */
    size_t lop_name = (size_t)(task - 1 - op_name);
    if (!lop_type || !lop_name) Py_RETURN_NONE;
    PyObject *era;
    if (dtype)
        era = s_era24;
    else if (starts_with(op_name, lop_name, "Default_") || starts_with(op_name, lop_name, "Gradients_") ||
             starts_with(op_name, lop_name, "Expand_") || starts_with(op_name, lop_name, "recompute_Default_") ||
             starts_with(op_name, lop_name, "Inference_") || starts_with(op_name, lop_name, "Parallel_"))
        era = s_era23;
    else
        era = s_era13;
    return Py_BuildValue("(s#s#LLLOis#OO)", op_type, (Py_ssize_t)lop_type, op_name, (Py_ssize_t)lop_name,
                         digits_value(task, ltask), digits_value(stream, lstream), digits_value(ts, lts), io_obj,
                         (int)digits_value(slot, lslot), fmt, (Py_ssize_t)lfmt, dtype ? dtype : Py_None, era);
}

static PyObject *npy_names(PyObject *self, PyObject *arg) {
    (void)self;
    if (n_tokens < 0) {
        PyErr_SetString(PyExc_RuntimeError, "_npy_scan.tokens() was not called");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(arg, "names() takes a sequence of str");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *t = parse_name(PySequence_Fast_GET_ITEM(seq, i));
        if (!t) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, t);
    }
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"table", npy_table, METH_O, "Set the plain descrs: a sequence of (descr: bytes, itemsize, is_float16)."},
    {"scan", npy_scan, METH_VARARGS,
     "scan(dir, names) -> (status, stored, data_offset, nbytes, file_size, shape_offsets, dims)"},
    {"tokens", npy_tokens, METH_O, "Set the dtype tokens of file names (lowercase str)."},
    {"names", npy_names, METH_O, "names(keys) -> [parse_tensor_name's fields as a tuple, or None]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_npy_scan", "npy headers of many files read in C (see npy_header.py)", -1, methods,
};

PyMODINIT_FUNC PyInit__npy_scan(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (!s_input) {
        s_input = PyUnicode_InternFromString("input");
        s_output = PyUnicode_InternFromString("output");
        s_era24 = PyUnicode_InternFromString("v2.4+");
        s_era23 = PyUnicode_InternFromString("v2.3");
        s_era13 = PyUnicode_InternFromString("v1.3-2.2");
        if (!s_input || !s_output || !s_era24 || !s_era23 || !s_era13) {
            Py_DECREF(m);
            return NULL;
        }
    }
    if (PyModule_AddIntConstant(m, "OK", ST_OK) || PyModule_AddIntConstant(m, "IRREGULAR", ST_IRREGULAR) ||
        PyModule_AddIntConstant(m, "DEFER", ST_DEFER) ||
        PyModule_AddIntConstant(m, "MAX_HEADER_BYTES", MAX_HEADER_BYTES) ||
        PyModule_AddIntConstant(m, "READ_SIZE", READ_SIZE)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
