/* JSON objects to and from Arrow columns, with no Python object per record or field
 * (stylus/core/batch/json_columns.py).
 *
 * `decode(values, fields)`: `values` a list of `bytes` (or None, a tombstone), each a JSON object; `fields` a
 * tuple of top-level field names to decode, or None for every field, in the order first seen. Returns
 * `(names, columns)`, one column per name: `None` where the column holds something this module does not build
 * (a nested value, mixed kinds, a duplicated field), else `(kind, rows, nulls, validity, data, offsets)`
 * (validity and offsets may be None). Returns None for the whole list when some value is not an object, is not
 * JSON, or is JSON this module does not vouch for (a number outside int64 or double, a deep nesting, an escape it
 * doubts): the caller then decodes the list with orjson, which accepts, refuses and reports exactly as always.
 *
 * So this module never decides that a document is valid unless it is sure orjson accepts it, and never builds a
 * value other than the one orjson builds (tests/core/test_json_columns.py checks both against orjson).
 *
 * `encode(names, columns, rows)`: each row's JSON object, as orjson writes the row's dict, and their total size. `names` the fields'
 * JSON texts (orjson's), `columns` one spec a field: `("int64" | "bool", validity, data, offset)` and
 * `("string", validity, offsets, data, offset)` read from Arrow buffers (validity None: no null; offset: the
 * array's first row in them), `("text", json)` a JSON array of the column's values written by orjson (the caller
 * renders every other type so), `("null",)`.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { K_NULL = 1, K_BOOL = 2, K_INT = 4, K_FLOAT = 8, K_STR = 16, K_OTHER = 32 };
#define MAX_DEPTH 64
#define MAX_COLUMNS 256
#define MAX_NUMBER 64

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t extra) {
    size_t want = b->len + extra;
    if (want <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < want)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap && buf_grow(b, n) < 0)
        return -1;
    char *w = b->p + b->len;
    if (n <= 16) {  /* a field's name, a number: shorter than a call to memcpy is worth */
        const char *r = src;
        for (size_t k = 0; k < n; k++)
            w[k] = r[k];
    } else {
        memcpy(w, src, n);
    }
    b->len += n;
    return 0;
}

typedef struct {
    Buf name;        /* UTF-8 */
    int kinds;       /* every kind seen */
    Py_ssize_t row;  /* the row its last value belongs to (-1: none yet) */
    int twice;       /* a row held the field twice */
    Buf fixed;       /* 8 bytes a row: int64, double, or 0/1 for a boolean */
    Buf text;        /* string bytes */
    Buf offsets;     /* int32 a row, plus one */
    Buf valid;       /* 1 byte a row */
    Py_ssize_t nulls;
} Column;

typedef struct {
    const unsigned char *p, *end;
    Column *columns;
    int count, all, hint;
    Py_ssize_t row;
    Buf scratch;
    locale_t c_locale;
} Decoder;

#define FAIL (-1)   /* not vouched for: the whole list goes to orjson */
#define NOMEM (-2)

static inline void skip_ws(Decoder *d) {
    while (d->p < d->end && (*d->p == ' ' || *d->p == '\n' || *d->p == '\r' || *d->p == '\t'))
        d->p++;
}

static int put_utf8(Buf *out, uint32_t cp) {
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = 0xC0 | (cp >> 6);
        b[1] = 0x80 | (cp & 0x3F);
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = 0xE0 | (cp >> 12);
        b[1] = 0x80 | ((cp >> 6) & 0x3F);
        b[2] = 0x80 | (cp & 0x3F);
        n = 3;
    } else {
        b[0] = 0xF0 | (cp >> 18);
        b[1] = 0x80 | ((cp >> 12) & 0x3F);
        b[2] = 0x80 | ((cp >> 6) & 0x3F);
        b[3] = 0x80 | (cp & 0x3F);
        n = 4;
    }
    return buf_put(out, b, n);
}

static int hex4(const unsigned char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return FAIL;
    }
    *out = v;
    return 0;
}

/* The length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong form, no surrogate, at most
 * U+10FFFF), or 0. */
static inline int utf8_length(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    if (c >= 0xC2 && c <= 0xDF)
        return end - p >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80)
            return 0;
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F))
            return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
            return 0;
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F))
            return 0;
        return 4;
    }
    return 0;
}

/* A string (d->p just past its opening quote) checked, and unescaped into `out` when out is not NULL. */
static int read_string(Decoder *d, Buf *out) {
    const unsigned char *p = d->p, *end = d->end;
    for (;;) {
        const unsigned char *start = p;
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (out != NULL && p > start && buf_put(out, start, p - start) < 0)
            return NOMEM;
        if (p >= end)
            return FAIL;
        unsigned char c = *p;
        if (c == '"') {
            d->p = p + 1;
            return 0;
        }
        if (c < 0x20)
            return FAIL;
        if (c >= 0x80) {
            int n = utf8_length(p, end);
            if (n == 0)
                return FAIL;
            if (out != NULL && buf_put(out, p, n) < 0)
                return NOMEM;
            p += n;
            continue;
        }
        /* an escape */
        if (end - p < 2)
            return FAIL;
        unsigned char e = p[1], byte;
        switch (e) {
        case '"': byte = '"'; break;
        case '\\': byte = '\\'; break;
        case '/': byte = '/'; break;
        case 'b': byte = '\b'; break;
        case 'f': byte = '\f'; break;
        case 'n': byte = '\n'; break;
        case 'r': byte = '\r'; break;
        case 't': byte = '\t'; break;
        case 'u': {
            uint32_t cp, low;
            if (end - p < 6 || hex4(p + 2, &cp) < 0)
                return FAIL;
            p += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return FAIL;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &low) < 0 || low < 0xDC00
                    || low > 0xDFFF)
                    return FAIL;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            if (out != NULL && put_utf8(out, cp) < 0)
                return NOMEM;
            continue;
        }
        default:
            return FAIL;
        }
        if (out != NULL && buf_put(out, &byte, 1) < 0)
            return NOMEM;
        p += 2;
    }
}

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A number: K_INT with *i (int64), or K_FLOAT with *x (finite double; with x NULL the float is only checked:
 * orjson refuses one that is infinite as a double). */
static int read_number(Decoder *d, int *kind, int64_t *i, double *x) {
    const unsigned char *start = d->p, *p = d->p, *end = d->end;
    int negative = 0, is_float = 0, digits = 0, truncated = 0;
    long scale = 0;      /* the value is mantissa * 10^scale */
    uint64_t mantissa = 0;  /* the first 19 significant digits */
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= end)
        return FAIL;
    const unsigned char *integer = p;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (digits < 19) {
                mantissa = mantissa * 10 + (uint64_t)(*p - '0');
                digits++;
            } else {
                truncated |= *p != '0';
                scale++;
            }
        }
    else
        return FAIL;
    size_t integer_digits = p - integer;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return FAIL;
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (mantissa == 0 && *p == '0') {
                scale--;  /* a leading zero */
            } else if (digits < 19) {
                mantissa = mantissa * 10 + (uint64_t)(*p - '0');
                digits++;
                scale--;
            } else {
                truncated |= *p != '0';
            }
        }
        is_float = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int minus = 0;
        if (p < end && (*p == '+' || *p == '-'))
            minus = *p++ == '-';
        if (p >= end || *p < '0' || *p > '9')
            return FAIL;
        long exponent = 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (exponent < 100000)
                exponent = exponent * 10 + (*p - '0');
        scale += minus ? -exponent : exponent;
        is_float = 1;
    }
    d->p = p;
    if (!is_float) {
        if (integer_digits > 19)
            return FAIL;
        if (negative ? mantissa > (uint64_t)INT64_MAX + 1 : mantissa > (uint64_t)INT64_MAX)
            return FAIL;  /* orjson gives a larger int or a float: not vouched for */
        *i = negative ? (int64_t)(0 - mantissa) : (int64_t)mantissa;
        *kind = K_INT;
        return 0;
    }
    *kind = K_FLOAT;
    if (mantissa == 0) {
        if (x != NULL)
            *x = negative ? -0.0 : 0.0;
        return 0;
    }
    if (!truncated && mantissa <= (1ULL << 53) && scale >= -22 && scale <= 22) {
        /* both operands exact, so one IEEE operation rounds correctly (Clinger's fast path) */
        if (x != NULL) {
            double v = scale < 0 ? (double)mantissa / POW10[-scale] : (double)mantissa * POW10[scale];
            *x = negative ? -v : v;
        }
        return 0;
    }
    if (x == NULL && digits + scale <= 308)
        return 0;  /* below 10^308: finite */
    size_t n = p - start;
    if (n >= MAX_NUMBER)
        return FAIL;
    char text[MAX_NUMBER];
    memcpy(text, start, n);
    text[n] = 0;
    char *stop;
    double v = strtod_l(text, &stop, d->c_locale);  /* correctly rounded, as orjson */
    if (stop != text + n || !isfinite(v))
        return FAIL;
    if (x != NULL)
        *x = v;
    return 0;
}

static int skip_value(Decoder *d, int depth);

static int expect_literal(Decoder *d, const char *word, size_t n) {
    if ((size_t)(d->end - d->p) < n || memcmp(d->p, word, n) != 0)
        return FAIL;
    d->p += n;
    return 0;
}

/* Past `ch` after optional whitespace, or FAIL. */
static inline int expect(Decoder *d, unsigned char ch) {
    skip_ws(d);
    if (d->p >= d->end || *d->p != ch)
        return FAIL;
    d->p++;
    return 0;
}

/* Just inside an array or object: 1 (and past `close`) when it is empty, else 0. */
static inline int empty(Decoder *d, unsigned char close) {
    skip_ws(d);
    if (d->p < d->end && *d->p == close) {
        d->p++;
        return 1;
    }
    return 0;
}

/* After an item of an array or object: 1 past its `close`, 0 past a comma (another item follows), or FAIL. */
static inline int after_item(Decoder *d, unsigned char close) {
    skip_ws(d);
    if (d->p >= d->end)
        return FAIL;
    if (*d->p == close) {
        d->p++;
        return 1;
    }
    if (*d->p != ',')
        return FAIL;
    d->p++;
    return 0;
}

/* Any JSON value, checked and passed over. */
static int skip_value(Decoder *d, int depth) {
    if (depth > MAX_DEPTH)
        return FAIL;
    skip_ws(d);
    if (d->p >= d->end)
        return FAIL;
    int rc, kind;
    int64_t i;
    switch (*d->p) {
    case '"':
        d->p++;
        return read_string(d, NULL);
    case 't':
        return expect_literal(d, "true", 4);
    case 'f':
        return expect_literal(d, "false", 5);
    case 'n':
        return expect_literal(d, "null", 4);
    case '[':
        d->p++;
        if (empty(d, ']'))
            return 0;
        do {
            if ((rc = skip_value(d, depth + 1)) < 0)
                return rc;
        } while ((rc = after_item(d, ']')) == 0);
        return rc < 0 ? rc : 0;
    case '{':
        d->p++;
        if (empty(d, '}'))
            return 0;
        do {
            if ((rc = expect(d, '"')) < 0 || (rc = read_string(d, NULL)) < 0 || (rc = expect(d, ':')) < 0
                || (rc = skip_value(d, depth + 1)) < 0)
                return rc;
        } while ((rc = after_item(d, '}')) == 0);
        return rc < 0 ? rc : 0;
    default:
        return read_number(d, &kind, &i, NULL);
    }
}

/* A null in every row so far: a column first seen at row `rows`. */
static int column_init(Column *c, Py_ssize_t rows) {
    memset(c, 0, sizeof(*c));
    c->row = -1;
    int32_t zero = 0;
    if (buf_grow(&c->fixed, 8 * rows) < 0 || buf_grow(&c->valid, rows) < 0
        || buf_grow(&c->offsets, 4 * (rows + 1)) < 0)
        return NOMEM;
    memset(c->fixed.p, 0, 8 * rows);
    c->fixed.len = 8 * rows;
    memset(c->valid.p, 0, rows);
    c->valid.len = rows;
    for (Py_ssize_t r = 0; r <= rows; r++)
        memcpy(c->offsets.p + 4 * r, &zero, 4);
    c->offsets.len = 4 * (rows + 1);
    c->nulls = rows;
    if (rows)
        c->kinds = K_NULL;
    return 0;
}

static inline int named(const Column *c, const char *name, size_t n) {
    return c->name.len == n && (n == 0 || memcmp(c->name.p, name, n) == 0);
}

static Column *find_column(Decoder *d, const char *name, size_t n) {
    if (d->hint < d->count && named(&d->columns[d->hint], name, n))  /* fields tend to come in one order */
        return &d->columns[d->hint++];
    for (int j = 0; j < d->count; j++)
        if (named(&d->columns[j], name, n)) {
            d->hint = j + 1;
            return &d->columns[j];
        }
    return NULL;
}

static int add_column(Decoder *d, const char *name, size_t n, Column **out) {
    if (d->count >= MAX_COLUMNS)
        return FAIL;
    Column *c = &d->columns[d->count];
    if (column_init(c, d->row) < 0 || buf_put(&c->name, name, n) < 0)
        return NOMEM;
    d->count++;
    *out = c;
    return 0;
}

/* This row's value of column c: null, a scalar, or K_OTHER (passed over). A field seen twice in a row takes
 * its last value, as orjson does; such a column is left to orjson (`twice`). */
static int read_field(Decoder *d, Column *c) {
    skip_ws(d);
    if (d->p >= d->end)
        return FAIL;
    int rc;
    if (c->row == d->row) {  /* the second time in this row: undo the first value */
        c->twice = 1;
        c->fixed.len -= 8;
        c->valid.len -= 1;
        int32_t start;
        memcpy(&start, c->offsets.p + c->offsets.len - 8, 4);
        c->offsets.len -= 4;
        c->text.len = start;
    }
    c->row = d->row;
    int64_t i = 0;
    double x = 0;
    int kind, valid = 1;
    unsigned char ch = *d->p;
    if (ch == '"') {
        d->p++;
        if ((rc = read_string(d, &c->text)) < 0)
            return rc;
        kind = K_STR;
    } else if (ch == 't' || ch == 'f') {
        if ((rc = ch == 't' ? expect_literal(d, "true", 4) : expect_literal(d, "false", 5)) < 0)
            return rc;
        kind = K_BOOL;
        i = ch == 't';
    } else if (ch == 'n') {
        if ((rc = expect_literal(d, "null", 4)) < 0)
            return rc;
        kind = K_NULL;
        valid = 0;
    } else if (ch == '[' || ch == '{') {
        if ((rc = skip_value(d, 2)) < 0)
            return rc;
        kind = K_OTHER;
        valid = 0;
    } else {
        if ((rc = read_number(d, &kind, &i, &x)) < 0)
            return rc;
        if (kind == K_FLOAT)
            memcpy(&i, &x, 8);
    }
    c->kinds |= kind;
    if (c->text.len > INT32_MAX)
        return FAIL;
    int32_t offset = (int32_t)c->text.len;
    unsigned char v = (unsigned char)valid;
    if (buf_put(&c->fixed, &i, 8) < 0 || buf_put(&c->valid, &v, 1) < 0 || buf_put(&c->offsets, &offset, 4) < 0)
        return NOMEM;
    return 0;
}

/* One value: an object (its fields into the columns) or null (a tombstone: a null in every column). */
static int read_row(Decoder *d) {
    int rc;
    if ((rc = expect(d, '{')) < 0)
        return rc;
    if (!empty(d, '}')) {
        do {
            if ((rc = expect(d, '"')) < 0)
                return rc;
            const unsigned char *name = d->p;
            while (d->p < d->end && *d->p != '"' && *d->p != '\\' && *d->p >= 0x20 && *d->p < 0x80)
                d->p++;
            size_t n;
            const char *key;
            if (d->p < d->end && *d->p == '"') {  /* the common name: ASCII, no escape */
                key = (const char *)name;
                n = d->p - name;
                d->p++;
            } else {
                d->p = name;
                d->scratch.len = 0;
                if ((rc = read_string(d, &d->scratch)) < 0)
                    return rc;
                key = d->scratch.p ? d->scratch.p : "";
                n = d->scratch.len;
            }
            if ((rc = expect(d, ':')) < 0)
                return rc;
            Column *c = find_column(d, key, n);
            if (c == NULL && d->all && (rc = add_column(d, key, n, &c)) < 0)
                return rc;
            if ((rc = c != NULL ? read_field(d, c) : skip_value(d, 1)) < 0)
                return rc;
        } while ((rc = after_item(d, '}')) == 0);
        if (rc < 0)
            return rc;
    }
    skip_ws(d);
    return d->p == d->end ? 0 : FAIL;
}

/* A null in each column the row did not name. */
static int end_row(Decoder *d) {
    static const int64_t zero = 0;
    static const unsigned char invalid = 0;
    for (int k = 0; k < d->count; k++) {
        Column *c = &d->columns[k];
        if (c->row == d->row)
            continue;
        c->row = d->row;
        c->kinds |= K_NULL;
        int32_t offset = (int32_t)c->text.len;
        if (buf_put(&c->fixed, &zero, 8) < 0 || buf_put(&c->valid, &invalid, 1) < 0
            || buf_put(&c->offsets, &offset, 4) < 0)
            return NOMEM;
    }
    return 0;
}

static void free_columns(Decoder *d) {
    for (int k = 0; k < d->count; k++) {
        Column *c = &d->columns[k];
        free(c->name.p);
        free(c->fixed.p);
        free(c->text.p);
        free(c->offsets.p);
        free(c->valid.p);
    }
    free(d->columns);
    free(d->scratch.p);
}

/* Bytes of one bit a row (Arrow's layout) from one byte a row. */
static PyObject *pack_bits(const unsigned char *bytes, Py_ssize_t rows) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, (rows + 7) / 8);
    if (out == NULL)
        return NULL;
    unsigned char *bits = (unsigned char *)PyBytes_AS_STRING(out);
    memset(bits, 0, (rows + 7) / 8);
    for (Py_ssize_t r = 0; r < rows; r++)
        bits[r >> 3] |= (bytes[r] != 0) << (r & 7);
    return out;
}

/* (kind, rows, nulls, validity, data, offsets), or None for a column left to orjson. */
static PyObject *column_result(Column *c, Py_ssize_t rows) {
    int kinds = c->kinds & ~K_NULL;
    if (c->twice || (kinds & (kinds - 1)) != 0 || kinds == K_OTHER)
        Py_RETURN_NONE;
    Py_ssize_t nulls = 0;
    for (Py_ssize_t r = 0; r < rows; r++)
        nulls += c->valid.p[r] == 0;
    const char *kind = kinds == K_BOOL ? "bool" : kinds == K_INT ? "int64" : kinds == K_FLOAT ? "double"
                       : kinds == K_STR ? "string" : "null";
    PyObject *validity = NULL, *data = NULL, *offsets = NULL;
    if (nulls && kinds) {
        validity = pack_bits((unsigned char *)c->valid.p, rows);
    } else {
        validity = Py_NewRef(Py_None);
    }
    if (validity == NULL)
        return NULL;
    if (kinds == K_BOOL) {
        unsigned char *flags = malloc(rows ? rows : 1);
        if (flags == NULL) {
            Py_DECREF(validity);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t r = 0; r < rows; r++)
            flags[r] = c->fixed.p[8 * r] != 0;  /* little-endian 0/1 */
        data = pack_bits(flags, rows);
        free(flags);
    } else if (kinds == K_INT || kinds == K_FLOAT) {
        data = PyBytes_FromStringAndSize(c->fixed.p, 8 * rows);
    } else if (kinds == K_STR) {
        data = PyBytes_FromStringAndSize(c->text.p ? c->text.p : "", c->text.len);
        offsets = PyBytes_FromStringAndSize(c->offsets.p, 4 * (rows + 1));
        if (offsets == NULL)
            Py_CLEAR(data);
    } else {
        data = Py_NewRef(Py_None);
    }
    if (data == NULL) {
        Py_DECREF(validity);
        return NULL;
    }
    if (offsets == NULL)
        offsets = Py_NewRef(Py_None);
    return Py_BuildValue("(snnNNN)", kind, rows, kinds ? nulls : rows, validity, data, offsets);
}

static locale_t c_locale;

static PyObject *decode(PyObject *self, PyObject *args) {
    PyObject *values, *fields;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &values, &fields))
        return NULL;
    if (fields != Py_None && !PyTuple_Check(fields)) {
        PyErr_SetString(PyExc_TypeError, "fields: a tuple of names, or None");
        return NULL;
    }
    Decoder d = {0};
    d.c_locale = c_locale;
    d.all = fields == Py_None;
    d.columns = calloc(MAX_COLUMNS, sizeof(Column));
    if (d.columns == NULL)
        return PyErr_NoMemory();
    int rc = 0;
    if (!d.all) {
        Py_ssize_t n = PyTuple_GET_SIZE(fields);
        if (n > MAX_COLUMNS)
            rc = FAIL;
        for (Py_ssize_t k = 0; rc == 0 && k < n; k++) {
            PyObject *name = PyTuple_GET_ITEM(fields, k);
            Py_ssize_t size;
            const char *text = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &size) : NULL;
            if (text == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "fields: names must be str");
                free_columns(&d);
                return NULL;
            }
            Column *c;
            if (find_column(&d, text, size) != NULL) {
                rc = FAIL;  /* a name twice: the caller's list, left to the general path */
                break;
            }
            rc = add_column(&d, text, size, &c);
        }
    }
    Py_ssize_t rows = PyList_GET_SIZE(values);
    for (Py_ssize_t r = 0; rc == 0 && r < rows; r++) {
        PyObject *value = PyList_GET_ITEM(values, r);
        d.row = r;
        if (value != Py_None) {
            if (!PyBytes_Check(value)) {
                rc = FAIL;
                break;
            }
            d.p = (const unsigned char *)PyBytes_AS_STRING(value);
            d.end = d.p + PyBytes_GET_SIZE(value);
            if ((rc = read_row(&d)) < 0)
                break;
        }
        rc = end_row(&d);
    }
    if (rc == NOMEM) {
        free_columns(&d);
        return PyErr_NoMemory();
    }
    if (rc < 0) {
        free_columns(&d);
        Py_RETURN_NONE;
    }
    PyObject *names = PyList_New(d.count), *columns = PyList_New(d.count);
    for (int k = 0; names != NULL && columns != NULL && k < d.count; k++) {
        Column *c = &d.columns[k];
        PyObject *name = PyUnicode_DecodeUTF8(c->name.p ? c->name.p : "", c->name.len, "strict");
        PyObject *column = name != NULL ? column_result(c, rows) : NULL;
        if (column == NULL) {
            Py_XDECREF(name);
            Py_CLEAR(names);
            break;
        }
        PyList_SET_ITEM(names, k, name);
        PyList_SET_ITEM(columns, k, column);
    }
    free_columns(&d);
    if (names == NULL || columns == NULL) {
        Py_XDECREF(names);
        Py_XDECREF(columns);
        return NULL;
    }
    return Py_BuildValue("(NN)", names, columns);
}

/* ---------------------------------------------------------------- encoding */

typedef struct {
    int kind;  /* 0 int64, 1 bool, 2 string, 3 text, 4 null */
    Py_buffer validity, data, offsets;
    Py_ssize_t offset;
    const char **starts;  /* text: each element's span */
    Py_ssize_t *lengths;
} Source;

static inline int bit(const unsigned char *bits, Py_ssize_t i) {
    return (bits[i >> 3] >> (i & 7)) & 1;
}

static int put_int(Buf *out, int64_t v) {
    char text[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        text[23 - n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        text[23 - n++] = '-';
    return buf_put(out, text + 24 - n, n);
}

/* A string as orjson writes it: `"` and `\` escaped, control characters as \b \t \n \f \r or \u00xx. */
static int put_string(Buf *out, const unsigned char *p, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (buf_grow(out, 6 * n + 2) < 0)
        return NOMEM;
    char *w = out->p + out->len;
    *w++ = '"';
    for (size_t k = 0; k < n; k++) {
        unsigned char c = p[k];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *w++ = (char)c;
            continue;
        }
        *w++ = '\\';
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '\b': *w++ = 'b'; break;
        case '\t': *w++ = 't'; break;
        case '\n': *w++ = 'n'; break;
        case '\f': *w++ = 'f'; break;
        case '\r': *w++ = 'r'; break;
        default:
            *w++ = 'u';
            *w++ = '0';
            *w++ = '0';
            *w++ = hex[c >> 4];
            *w++ = hex[c & 15];
        }
    }
    *w++ = '"';
    out->len = w - out->p;
    return 0;
}

/* The spans of a JSON array's `rows` elements (orjson's text: no space between tokens). */
static int split_array(const char *text, Py_ssize_t size, Py_ssize_t rows, const char **starts, Py_ssize_t *lengths) {
    const char *p = text, *end = text + size;
    if (size < 2 || *p != '[' || end[-1] != ']')
        return FAIL;
    p++;
    end--;
    Py_ssize_t row = 0;
    while (p < end) {
        const char *start = p;
        int depth = 0;
        for (; p < end; p++) {
            char c = *p;
            if (c == '"') {
                for (p++; p < end && *p != '"'; p++)
                    if (*p == '\\')
                        p++;
            } else if (c == '[' || c == '{') {
                depth++;
            } else if (c == ']' || c == '}') {
                depth--;
            } else if (c == ',' && depth == 0) {
                break;
            }
        }
        if (row >= rows)
            return FAIL;
        starts[row] = start;
        lengths[row++] = p - start;
        p++;  /* past the comma */
    }
    return row == rows ? 0 : FAIL;
}

static void release_sources(Source *sources, Py_ssize_t count) {
    for (Py_ssize_t k = 0; k < count; k++) {
        Source *s = &sources[k];
        if (s->validity.obj)
            PyBuffer_Release(&s->validity);
        if (s->data.obj)
            PyBuffer_Release(&s->data);
        if (s->offsets.obj)
            PyBuffer_Release(&s->offsets);
        free(s->starts);
        free(s->lengths);
    }
    free(sources);
}

static int take_buffer(PyObject *obj, Py_buffer *view) {
    if (obj == Py_None)
        return 0;
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

/* The spec of one column (see the top of this file), checked against `rows`. */
static int open_source(PyObject *spec, Py_ssize_t rows, Source *s) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(spec, 0))) {
        PyErr_SetString(PyExc_TypeError, "encode: a column is a tuple (kind, ...)");
        return -1;
    }
    const char *kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(spec, 0));
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    if (kind == NULL)
        return -1;
    if (strcmp(kind, "null") == 0) {
        s->kind = 4;
        return 0;
    }
    if (strcmp(kind, "text") == 0) {
        PyObject *text = n == 2 ? PyTuple_GET_ITEM(spec, 1) : NULL;
        if (text == NULL || !PyBytes_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "encode: (\"text\", bytes)");
            return -1;
        }
        s->kind = 3;
        s->starts = malloc(sizeof(char *) * (rows ? rows : 1));
        s->lengths = malloc(sizeof(Py_ssize_t) * (rows ? rows : 1));
        if (s->starts == NULL || s->lengths == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (split_array(PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text), rows, s->starts, s->lengths) < 0) {
            PyErr_Format(PyExc_ValueError, "encode: a text column is not a JSON array of %zd values", rows);
            return -1;
        }
        return 0;
    }
    int is_string = strcmp(kind, "string") == 0;
    s->kind = strcmp(kind, "int64") == 0 ? 0 : strcmp(kind, "bool") == 0 ? 1 : is_string ? 2 : -1;
    if (s->kind < 0 || n != (is_string ? 5 : 4)) {
        PyErr_Format(PyExc_ValueError, "encode: no column kind %s of %zd items", kind, n);
        return -1;
    }
    s->offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, n - 1));
    if (s->offset < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "encode: a negative offset");
        return -1;
    }
    if (take_buffer(PyTuple_GET_ITEM(spec, 1), &s->validity) < 0
        || take_buffer(PyTuple_GET_ITEM(spec, is_string ? 3 : 2), &s->data) < 0
        || (is_string && take_buffer(PyTuple_GET_ITEM(spec, 2), &s->offsets) < 0))
        return -1;
    Py_ssize_t last = s->offset + rows;
    int short_buffers = (s->validity.obj && s->validity.len * 8 < last)
                        || (s->kind == 0 && s->data.len < 8 * last) || (s->kind == 1 && s->data.len * 8 < last)
                        || (is_string && s->offsets.len < 4 * (last + 1));
    if (!short_buffers && is_string && rows) {
        const int32_t *offsets = (const int32_t *)s->offsets.buf;
        short_buffers = offsets[s->offset] < 0 || offsets[last] < offsets[s->offset] || offsets[last] > s->data.len;
    }
    if (short_buffers) {
        PyErr_Format(PyExc_ValueError, "encode: a %s column's buffers hold fewer than %zd rows", kind, rows);
        return -1;
    }
    return 0;
}

static int put_value(Buf *out, Source *s, Py_ssize_t row) {
    Py_ssize_t i = s->offset + row;
    if (s->kind == 4 || (s->kind != 3 && s->validity.obj && !bit(s->validity.buf, i)))
        return buf_put(out, "null", 4);
    switch (s->kind) {
    case 0:
        return put_int(out, ((const int64_t *)s->data.buf)[i]);
    case 1:
        return bit(s->data.buf, i) ? buf_put(out, "true", 4) : buf_put(out, "false", 5);
    case 2: {
        const int32_t *offsets = (const int32_t *)s->offsets.buf;
        int32_t a = offsets[i], b = offsets[i + 1];
        if (b < a || b > s->data.len)
            return FAIL;
        return put_string(out, (const unsigned char *)s->data.buf + a, (size_t)(b - a));
    }
    default:
        return buf_put(out, s->starts[row], s->lengths[row]);
    }
}

static PyObject *encode(PyObject *self, PyObject *args) {
    PyObject *names, *columns;
    Py_ssize_t rows;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyList_Type, &names, &PyList_Type, &columns, &rows))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(names);
    if (PyList_GET_SIZE(columns) != count || rows < 0) {
        PyErr_SetString(PyExc_ValueError, "encode: one column a name, and rows >= 0");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < count; k++)
        if (!PyBytes_Check(PyList_GET_ITEM(names, k))) {
            PyErr_SetString(PyExc_TypeError, "encode: names are the fields' JSON texts (bytes)");
            return NULL;
        }
    Source *sources = calloc(count > 0 ? (size_t)count : 1, sizeof(Source));
    if (sources == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t k = 0; k < count; k++)
        if (open_source(PyList_GET_ITEM(columns, k), rows, &sources[k]) < 0) {
            release_sources(sources, count);
            return NULL;
        }
    /* what comes before each value: `{"name":` for the first, `,"name":` for the others */
    Buf *heads = calloc(count > 0 ? (size_t)count : 1, sizeof(Buf));
    PyObject *out = heads != NULL ? PyList_New(rows) : PyErr_NoMemory();
    Buf row = {0};
    int rc = 0;
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; out != NULL && rc == 0 && k < count; k++) {
        PyObject *name = PyList_GET_ITEM(names, k);
        if (buf_put(&heads[k], k ? "," : "{", 1) < 0
            || buf_put(&heads[k], PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name)) < 0
            || buf_put(&heads[k], ":", 1) < 0)
            rc = NOMEM;
    }
    for (Py_ssize_t r = 0; out != NULL && rc == 0 && r < rows; r++) {
        row.len = 0;
        if (count == 0)
            rc = buf_put(&row, "{", 1);
        for (Py_ssize_t k = 0; rc == 0 && k < count; k++) {
            if (buf_put(&row, heads[k].p, heads[k].len) < 0) {
                rc = NOMEM;
                break;
            }
            rc = put_value(&row, &sources[k], r);
        }
        if (rc == 0)
            rc = buf_put(&row, "}", 1);
        if (rc == 0) {
            PyObject *value = PyBytes_FromStringAndSize(row.p, row.len);
            if (value == NULL) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, r, value);
            total += row.len;
        }
    }
    free(row.p);
    for (Py_ssize_t k = 0; heads != NULL && k < count; k++)
        free(heads[k].p);
    free(heads);
    release_sources(sources, count);
    if (rc != 0) {
        Py_XDECREF(out);
        if (rc == NOMEM)
            return PyErr_NoMemory();
        PyErr_SetString(PyExc_ValueError, "encode: a string column's offsets run past its data");
        return NULL;
    }
    return out != NULL ? Py_BuildValue("(Nn)", out, total) : NULL;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "decode(values, fields) -> (names, columns) | None"},
    {"encode", encode, METH_VARARGS, "encode(names, columns, rows) -> (values, their total size)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_json_columns", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__json_columns(void) {
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (c_locale == (locale_t)0)
        return PyErr_NoMemory();
    return PyModule_Create(&module);
}
