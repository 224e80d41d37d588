/* The fixed-layout check and number parsing of '|'-separated log lines, in one pass over a chunk.
 *
 * ingest/formats/textlog.py matches a learned line layout (a "plan": for each value field the fixed
 * text before and after the value, then fixed fields, then the text after the last '|') with numpy
 * and Arrow kernels, about thirty calls a chunk, each a pass over all of the chunk's lines. This
 * module does the same per line, with the GIL released, so each line's bytes are read once while
 * they are in cache. It decides exactly what the Arrow path decides:
 *
 *   - ok[i]: every fixed text of line i is as planned (starts_with/ends_with of each value field,
 *     equality of the fixed fields, the last field once blanks are trimmed);
 *   - values[j * n + i]: value j of line i, where slow[j * n + i] is 0. It is 0 only for a plain
 *     decimal (-?D+(.D+)?([eE][+-]?D+)?) of at most 19 digits whose value is an integer below 2^53
 *     times a power of ten within 1e-22..1e22: both factors are exact doubles, so one IEEE
 *     multiplication or division rounds it correctly, the same double as any correct parser
 *     (Arrow's cast) gives. Anything else (empty, units, thousands separators, inf, more digits)
 *     is left to the caller (slow = 1), which parses that field with Arrow as before.
 *
 * The caller owns the layout: bounds are the chunk's segment boundaries (a segment ends with its
 * '|' or newline), first[i] the first segment of line i, which has exactly n_pipes pipes.
 *
 * count_separators and split_fields cut a chunk into those segments (what textlog._Split did with
 * eight numpy passes and their temporaries): one pass counts, the caller allocates, one pass fills.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_FIELDS 256 /* textlog._C_MAX_FIELDS: a wider layout is left to Arrow and never comes here */

static const double EXACT_POWERS[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

typedef struct {
    const char *text;
    Py_ssize_t len;
} Literal;

/* Parse s[0:len] on the exact fast path; 1 and *out set on success, 0 when the caller must. */
static int parse_plain(const unsigned char *s, Py_ssize_t len, double *out) {
    Py_ssize_t i = 0;
    int negative = 0, digits = 0, frac_digits = 0, exp_digits = 0;
    uint64_t mantissa = 0;
    long exponent = 0;
    if (i < len && s[i] == '-') {
        negative = 1;
        i++;
    }
    Py_ssize_t int_start = i;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        if (++digits > 19) return 0;
        mantissa = mantissa * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == int_start) return 0; /* no integer part: ".5", "-", "" */
    if (i < len && s[i] == '.') {
        Py_ssize_t frac_start = ++i;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
            if (++digits > 19) return 0;
            mantissa = mantissa * 10 + (uint64_t)(s[i] - '0');
            frac_digits++;
        }
        if (i == frac_start) return 0; /* "5." */
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        int exp_negative = 0;
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-')) exp_negative = s[i++] == '-';
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
            if (++exp_digits > 4) return 0;
            exponent = exponent * 10 + (s[i] - '0');
        }
        if (exp_digits == 0) return 0;
        if (exp_negative) exponent = -exponent;
    }
    if (i != len) return 0; /* trailing text: a unit, a separator */
    exponent -= frac_digits;
    double x;
    if (mantissa == 0) {
        x = 0.0;
    } else {
        if (mantissa > ((uint64_t)1 << 53) || exponent < -22 || exponent > 22) return 0;
        x = (double)mantissa;
        x = exponent < 0 ? x / EXACT_POWERS[-exponent] : x * EXACT_POWERS[exponent];
    }
    *out = negative ? -x : x;
    return 1;
}

static int is_blank(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static int literals_of(PyObject *seq, Literal *out, Py_ssize_t limit, const char *what) {
    if (!PyTuple_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of bytes", what);
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    if (n > limit) {
        PyErr_Format(PyExc_ValueError, "%s: at most %zd fields", what, limit);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyTuple_GET_ITEM(seq, k);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s must be a tuple of bytes", what);
            return -1;
        }
        out[k].text = PyBytes_AS_STRING(item);
        out[k].len = PyBytes_GET_SIZE(item);
    }
    return (int)n;
}

/* The end of a function that took buffers: release them all; NULL where it set an error, else None. */
static PyObject *release_all(Py_buffer **buffers, int count) {
    for (int k = 0; k < count; k++) PyBuffer_Release(buffers[k]);
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
}

static PyObject *match_fields(PyObject *self, PyObject *args) {
    Py_buffer chunk, bounds, first, ok, values, slow;
    Py_ssize_t n_pipes;
    PyObject *befores_obj, *afters_obj, *fixed_obj;
    const char *last;
    Py_ssize_t last_len;
    if (!PyArg_ParseTuple(args, "y*y*y*nOOOy#w*w*w*", &chunk, &bounds, &first, &n_pipes, &befores_obj, &afters_obj,
                          &fixed_obj, &last, &last_len, &ok, &values, &slow))
        return NULL;
    Py_buffer *buffers[] = {&chunk, &bounds, &first, &ok, &values, &slow};
    Literal befores[MAX_FIELDS], afters[MAX_FIELDS], fixed[MAX_FIELDS];
    int nv = literals_of(befores_obj, befores, MAX_FIELDS, "befores");
    int na = nv < 0 ? -1 : literals_of(afters_obj, afters, MAX_FIELDS, "afters");
    int nf = na < 0 ? -1 : literals_of(fixed_obj, fixed, MAX_FIELDS, "fixed");
    if (nf < 0) goto done;
    Py_ssize_t n = first.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t n_segments = bounds.len / (Py_ssize_t)sizeof(int32_t) - 1;
    if (na != nv || n_pipes != nv + nf + 1 || ok.len < n || values.len < (Py_ssize_t)sizeof(double) * nv * n ||
        slow.len < nv * n) {
        PyErr_SetString(PyExc_ValueError, "match_fields: inconsistent plan or output sizes");
        goto done;
    }
    const unsigned char *data = chunk.buf;
    const int32_t *bound = bounds.buf;
    const int64_t *line_first = first.buf;
    unsigned char *ok_out = ok.buf, *slow_out = slow.buf;
    double *value_out = values.buf;
    int bad_index = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t f = line_first[i];
        if (f < 0 || f + n_pipes + 1 > n_segments || bound[f] < 0 || bound[f + n_pipes + 1] > chunk.len) {
            bad_index = 1;
            break;
        }
        for (Py_ssize_t k = f; k <= f + n_pipes; k++) bad_index |= bound[k] > bound[k + 1];
        if (bad_index) break; /* every read below stays inside the line's own bytes */
        int good = 1;
        for (int j = 0; j < nv; j++) {
            Py_ssize_t s = bound[f + 1 + j], e = bound[f + 2 + j], size = e - s;
            Py_ssize_t lb = befores[j].len, la = afters[j].len;
            good = good && size >= lb && size >= la && memcmp(data + s, befores[j].text, lb) == 0 &&
                   memcmp(data + e - la, afters[j].text, la) == 0;
            double x = 0.0;
            int fast = size > lb + la && parse_plain(data + s + lb, size - lb - la, &x);
            value_out[j * n + i] = x;
            slow_out[j * n + i] = !fast;
        }
        for (int k = 0; good && k < nf; k++) {
            Py_ssize_t s = bound[f + 1 + nv + k], e = bound[f + 2 + nv + k];
            good = e - s == fixed[k].len && memcmp(data + s, fixed[k].text, fixed[k].len) == 0;
        }
        if (good) {
            Py_ssize_t s = bound[f + n_pipes], e = bound[f + n_pipes + 1];
            while (e > s && is_blank(data[e - 1])) e--;
            good = e - s == last_len && memcmp(data + s, last, last_len) == 0;
        }
        ok_out[i] = (unsigned char)good;
    }
    Py_END_ALLOW_THREADS;
    if (bad_index)
        PyErr_SetString(PyExc_IndexError, "match_fields: a line's segments lie outside the chunk or out of order");
done:
    return release_all(buffers, 6);
}


/* Bit k of the result is set where p[k] is '|' or '\n' (16 bytes). */
#ifdef __SSE2__
static inline unsigned separators16(const unsigned char *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i hits = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('|')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\n')));
    return (unsigned)_mm_movemask_epi8(hits);
}
#else
static inline unsigned separators16(const unsigned char *p) {
    unsigned mask = 0;
    for (int k = 0; k < 16; k++) mask |= (unsigned)(p[k] == '|' || p[k] == '\n') << k;
    return mask;
}
#endif

static PyObject *count_separators(PyObject *self, PyObject *args) {
    Py_buffer chunk;
    if (!PyArg_ParseTuple(args, "y*", &chunk)) return NULL;
    const unsigned char *d = chunk.buf;
    Py_ssize_t len = chunk.len, i = 0, seps = 0, lines = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (; i + 16 <= len; i += 16) {
        unsigned mask = separators16(d + i);
        while (mask) {
            lines += d[i + __builtin_ctz(mask)] == '\n';
            mask &= mask - 1;
            seps++;
        }
    }
    for (; i < len; i++) {
        seps += d[i] == '|' || d[i] == '\n';
        lines += d[i] == '\n';
    }
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&chunk);
    return Py_BuildValue("nn", seps, lines);
}

/* One separator at position pos (segment index seg) into the outputs; a newline ends line *line. */
static inline void take_separator(const unsigned char *d, Py_ssize_t pos, Py_ssize_t seg, int32_t *bounds,
                                  int64_t *first, int64_t *pipes, int32_t *offsets, Py_ssize_t *line,
                                  Py_ssize_t *line_first) {
    bounds[seg + 1] = (int32_t)(pos + 1);
    if (d[pos] == '\n') {
        first[*line] = *line_first;
        pipes[*line] = seg - *line_first;
        offsets[*line + 1] = (int32_t)(pos + 1);
        ++*line;
        *line_first = seg + 1;
    }
}

static PyObject *split_fields(PyObject *self, PyObject *args) {
    Py_buffer chunk, bounds_buf, first_buf, pipes_buf, offsets_buf;
    if (!PyArg_ParseTuple(args, "y*w*w*w*w*", &chunk, &bounds_buf, &first_buf, &pipes_buf, &offsets_buf)) return NULL;
    Py_buffer *buffers[] = {&chunk, &bounds_buf, &first_buf, &pipes_buf, &offsets_buf};
    const unsigned char *d = chunk.buf;
    Py_ssize_t len = chunk.len;
    Py_ssize_t max_seps = bounds_buf.len / (Py_ssize_t)sizeof(int32_t) - 1;
    Py_ssize_t max_lines = first_buf.len / (Py_ssize_t)sizeof(int64_t);
    if (len > INT32_MAX || max_seps < 0 || offsets_buf.len < (max_lines + 1) * (Py_ssize_t)sizeof(int32_t) ||
        pipes_buf.len < max_lines * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "split_fields: output sizes do not fit (see count_separators)");
        goto done;
    }
    int32_t *bounds = bounds_buf.buf, *offsets = offsets_buf.buf;
    int64_t *first = first_buf.buf, *pipes = pipes_buf.buf;
    Py_ssize_t i = 0, seg = 0, line = 0, line_first = 0;
    int overflow = 0;
    Py_BEGIN_ALLOW_THREADS;
    bounds[0] = 0;
    offsets[0] = 0;
    for (; i + 16 <= len && !overflow; i += 16) {
        unsigned mask = separators16(d + i);
        while (mask) {
            Py_ssize_t pos = i + __builtin_ctz(mask);
            mask &= mask - 1;
            if (seg >= max_seps || (d[pos] == '\n' && line >= max_lines)) {
                overflow = 1;
                break;
            }
            take_separator(d, pos, seg++, bounds, first, pipes, offsets, &line, &line_first);
        }
    }
    for (; i < len && !overflow; i++) {
        if (d[i] != '|' && d[i] != '\n') continue;
        if (seg >= max_seps || (d[i] == '\n' && line >= max_lines)) {
            overflow = 1;
            break;
        }
        take_separator(d, i, seg++, bounds, first, pipes, offsets, &line, &line_first);
    }
    Py_END_ALLOW_THREADS;
    if (overflow || seg != max_seps || line != max_lines)
        PyErr_SetString(PyExc_ValueError, "split_fields: the outputs were not sized by count_separators");
done:
    return release_all(buffers, 5);
}

/* same[i]: field 0 of line i is shape once its digits are made '0' (textlog._match_head). */
static PyObject *match_shape(PyObject *self, PyObject *args) {
    Py_buffer chunk, bounds_buf, first_buf, shape, same_buf;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &chunk, &bounds_buf, &first_buf, &shape, &same_buf)) return NULL;
    Py_buffer *buffers[] = {&chunk, &bounds_buf, &first_buf, &shape, &same_buf};
    Py_ssize_t n = first_buf.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t n_segments = bounds_buf.len / (Py_ssize_t)sizeof(int32_t) - 1;
    if (same_buf.len < n) {
        PyErr_SetString(PyExc_ValueError, "match_shape: the output is shorter than the lines");
        goto done;
    }
    const unsigned char *d = chunk.buf, *want = shape.buf;
    const int32_t *bounds = bounds_buf.buf;
    const int64_t *first = first_buf.buf;
    unsigned char *same = same_buf.buf;
    int bad_index = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t f = first[i];
        if (f < 0 || f + 1 > n_segments || bounds[f] < 0 || bounds[f + 1] > chunk.len) {
            bad_index = 1;
            break;
        }
        Py_ssize_t s = bounds[f], width = bounds[f + 1] - s;
        int match = width == shape.len;
        for (Py_ssize_t k = 0; match && k < width; k++) {
            unsigned char c = d[s + k];
            match = (c >= '0' && c <= '9' ? '0' : c) == want[k];
        }
        same[i] = (unsigned char)match;
    }
    Py_END_ALLOW_THREADS;
    if (bad_index) PyErr_SetString(PyExc_IndexError, "match_shape: a line's segments lie outside the chunk");
done:
    return release_all(buffers, 5);
}

static PyObject *parse_one(PyObject *self, PyObject *args) {
    const char *text;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "y#", &text, &len)) return NULL;
    double x;
    if (!parse_plain((const unsigned char *)text, len, &x)) Py_RETURN_NONE;
    return PyFloat_FromDouble(x);
}

static PyMethodDef methods[] = {
    {"match_fields", match_fields, METH_VARARGS,
     "match_fields(chunk, bounds, first, n_pipes, befores, afters, fixed, last, ok, values, slow)\n\n"
     "Check and parse the '|'-separated lines of a chunk against a plan (see the module source)."},
    {"count_separators", count_separators, METH_VARARGS,
     "count_separators(chunk) -> (segments, lines): how many '|' and newlines, and how many newlines."},
    {"split_fields", split_fields, METH_VARARGS,
     "split_fields(chunk, bounds, first, pipes, offsets): fill the segment bounds (int32, segments + 1),\n"
     "each line's first segment and pipe count (int64, lines) and line offsets (int32, lines + 1)."},
    {"match_shape", match_shape, METH_VARARGS,
     "match_shape(chunk, bounds, first, shape, same): which lines' field 0 has shape once digits are '0'."},
    {"parse_plain", parse_one, METH_VARARGS,
     "parse_plain(text) -> float | None: the exact fast path alone (None: left to the caller)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_fields", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__fields(void) { return PyModule_Create(&module); }
