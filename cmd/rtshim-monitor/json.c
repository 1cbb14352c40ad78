#include "json.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// As strict as Go's encoding/json on what it refuses: an unknown escape, a control
// character in a string, a malformed literal or number, text after the object. As Go's
// Unmarshal on what it accepts: keys match case-insensitively (keyeq), a repeated key's
// last value wins, null leaves a string or boolean as it was and empties the array (and
// a null document sets nothing), invalid UTF-8 becomes U+FFFD. cjson.FuzzConfig holds it
// to encoding/json; where it differs on purpose: values nested deeper than 64 are
// refused, and a string ends at a \u0000 (the configs are C strings).

struct p {
	const char *s;
	const char *err;
};

static void ws(struct p *p) {
	while (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')
		p->s++;
}

static int hex4(const char *s) {
	int v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

static size_t utf8(char *o, uint32_t c) {
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (char)(0xc0 | c >> 6);
		o[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (char)(0xe0 | c >> 12);
		o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		o[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | c >> 18);
	o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	o[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

// utf8_len returns the length of the valid UTF-8 sequence at s (at most n bytes), or 0.
static size_t utf8_len(const unsigned char *s, size_t n) {
	if (s[0] < 0x80)
		return 1;
	size_t l;
	uint32_t c;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		l = 2;
		c = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		l = 3;
		c = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		l = 4;
		c = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n < l)
		return 0;
	for (size_t i = 1; i < l; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if ((l == 3 && c < 0x800) || (l == 4 && (c < 0x10000 || c > 0x10ffff)) || (c >= 0xd800 && c < 0xe000))
		return 0;
	return l;
}

// str reads a string; the result is malloc'd (NULL on error, p->err set).
static char *str(struct p *p) {
	ws(p);
	if (*p->s != '"') {
		p->err = *p->s ? "expected a string" : "unexpected end of JSON input";
		return NULL;
	}
	p->s++;
	const char *start = p->s;
	size_t n = 0;
	while (*p->s && *p->s != '"') {
		unsigned char ch = (unsigned char)*p->s;
		if (ch < 0x20) {
			p->err = "invalid character in string literal";
			return NULL;
		}
		if (ch == '\\') {
			char e = p->s[1];
			if (!e)
				break;
			if (!strchr("\"\\/bfnrtu", e)) {
				p->err = "invalid character in string escape code";
				return NULL;
			}
			p->s++;
		}
		p->s++;
		n++;
	}
	if (*p->s != '"') {
		p->err = "unexpected end of JSON input";
		return NULL;
	}
	char *out = malloc(n * 4 + 1), *o = out;
	if (!out) {
		p->err = "out of memory";
		return NULL;
	}
	for (const char *c = start; c < p->s; c++) {
		if (*c != '\\') {
			size_t l = utf8_len((const unsigned char *)c, (size_t)(p->s - c));
			if (l == 0) {
				o += utf8(o, 0xfffd); // as Go: each invalid byte
				continue;
			}
			memcpy(o, c, l);
			o += l;
			c += l - 1;
			continue;
		}
		c++;
		switch (*c) {
		case 'n': *o++ = '\n'; break;
		case 't': *o++ = '\t'; break;
		case 'r': *o++ = '\r'; break;
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'u': {
			int v = hex4(c + 1);
			if (v < 0) {
				free(out);
				p->err = "invalid character in \\u hexadecimal character escape";
				return NULL;
			}
			c += 4;
			uint32_t cp = (uint32_t)v;
			if (cp >= 0xd800 && cp < 0xdc00 && c[1] == '\\' && c[2] == 'u') {
				int lo = hex4(c + 3);
				if (lo >= 0xdc00 && lo < 0xe000) {
					cp = 0x10000 + ((cp - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
					c += 6;
				} else {
					cp = 0xfffd;
				}
			} else if (cp >= 0xd800 && cp < 0xe000) {
				cp = 0xfffd;
			}
			o += utf8(o, cp);
			break;
		}
		default: *o++ = *c; break; // " \ /
		}
	}
	*o = 0;
	p->s++;
	return out;
}

// digits returns s past its leading decimal digits.
static const char *digits(const char *s) {
	while (*s >= '0' && *s <= '9')
		s++;
	return s;
}

// number reads a JSON number; its text is p->s before the call up to p->s after.
static void number(struct p *p) {
	const char *s = p->s, *d;
	if (*s == '-')
		s++;
	if (*s == '0')
		s++;
	else if ((d = digits(s)) > s) // a first digit of 1 to 9: 0 is the case above
		s = d;
	else {
		p->err = "invalid character in numeric literal";
		return;
	}
	if (*s == '.') {
		if ((d = digits(s + 1)) == s + 1) {
			p->err = "invalid character after decimal point in numeric literal";
			return;
		}
		s = d;
	}
	if (*s == 'e' || *s == 'E') {
		s++;
		if (*s == '+' || *s == '-')
			s++;
		if ((d = digits(s)) == s) {
			p->err = "invalid character in exponent of numeric literal";
			return;
		}
		s = d;
	}
	p->s = s;
}

// literal reads word (true, false, null) or sets the error.
static bool literal(struct p *p, const char *word) {
	size_t n = strlen(word);
	if (strncmp(p->s, word, n) != 0) {
		p->err = "invalid character in literal";
		return false;
	}
	p->s += n;
	return true;
}

static void skip(struct p *p, int depth) {
	ws(p);
	if (depth > 64) {
		p->err = "nested too deep";
		return;
	}
	char c = *p->s;
	if (c == '"') {
		free(str(p));
	} else if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		p->s++;
		ws(p);
		if (*p->s == close) {
			p->s++;
			return;
		}
		for (;;) {
			if (close == '}') {
				free(str(p));
				if (p->err)
					return;
				ws(p);
				if (*p->s != ':') {
					p->err = "expected ':'";
					return;
				}
				p->s++;
			}
			skip(p, depth + 1);
			if (p->err)
				return;
			ws(p);
			if (*p->s == ',') {
				p->s++;
				continue;
			}
			if (*p->s == close) {
				p->s++;
				return;
			}
			p->err = "expected ',' or end";
			return;
		}
	} else if (c == 't') {
		literal(p, "true");
	} else if (c == 'f') {
		literal(p, "false");
	} else if (c == 'n') {
		literal(p, "null");
	} else if (c == '-' || (c >= '0' && c <= '9')) {
		number(p);
	} else if (c) {
		p->err = "invalid character looking for beginning of value";
	} else {
		p->err = "unexpected end of JSON input";
	}
}

// boolean reads a boolean into *b; null leaves it as it was.
static void boolean(struct p *p, bool *b) {
	ws(p);
	if (*p->s == 't') {
		if (literal(p, "true"))
			*b = true;
	} else if (*p->s == 'f') {
		if (literal(p, "false"))
			*b = false;
	} else if (*p->s == 'n') {
		literal(p, "null");
	} else {
		p->err = "expected a boolean";
	}
}

// string_into reads a string into *sp (freeing what was there); null leaves it.
static void string_into(struct p *p, char **sp) {
	ws(p);
	if (*p->s == 'n') {
		literal(p, "null");
		return;
	}
	char *v = str(p);
	if (v) {
		free(*sp);
		*sp = v;
	}
}

static void args_free(struct json_config *cfg) {
	for (size_t i = 0; i < cfg->runtime_nargs; i++)
		free(cfg->runtime_args[i]);
	free(cfg->runtime_args);
	cfg->runtime_args = NULL;
	cfg->runtime_nargs = 0;
}

// array reads the string array into cfg->runtime_args, replacing what was there (null:
// none), as Unmarshal does with a slice.
static void array(struct p *p, struct json_config *cfg) {
	ws(p);
	args_free(cfg);
	if (*p->s == 'n') {
		literal(p, "null");
		return;
	}
	if (*p->s != '[') {
		p->err = "expected an array";
		return;
	}
	p->s++;
	ws(p);
	if (*p->s == ']') {
		p->s++;
		return;
	}
	for (;;) {
		char *v = str(p);
		if (!v)
			return;
		char **a = realloc(cfg->runtime_args, sizeof(char *) * (cfg->runtime_nargs + 1));
		if (!a) {
			free(v);
			p->err = "out of memory";
			return;
		}
		cfg->runtime_args = a;
		cfg->runtime_args[cfg->runtime_nargs++] = v;
		ws(p);
		if (*p->s == ',') {
			p->s++;
			continue;
		}
		if (*p->s == ']') {
			p->s++;
			return;
		}
		p->err = "expected ',' or ']'";
		return;
	}
}

// keyeq matches a key to a field name (ASCII) as Go's Unmarshal does: case-insensitively
// under Unicode's simple folding, where two letters outside ASCII fold to ASCII ones:
// U+017F (long s) to s and U+212A (Kelvin sign) to k.
static bool keyeq(const char *k, const char *name) {
	const unsigned char *p = (const unsigned char *)k;
	for (; *name; name++) {
		char c = *name;
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (p[0] == 0xc5 && p[1] == 0xbf && c == 's')
			p += 2;
		else if (p[0] == 0xe2 && p[1] == 0x84 && p[2] == 0xaa && c == 'k')
			p += 3;
		else if (*p && (*p == (unsigned char)c || (*p >= 'A' && *p <= 'Z' && *p - 'A' + 'a' == c)))
			p++;
		else
			return false;
	}
	return *p == 0;
}

// end checks that only whitespace follows the top-level value.
static const char *end(struct p *p) {
	ws(p);
	return *p->s ? "invalid character after top-level value" : NULL;
}

const char *json_parse_config(const char *s, struct json_config *cfg, bool logger) {
	struct p p = {s, NULL};
	ws(&p);
	if (*p.s == 'n') // null: nothing set, as Unmarshal into a struct
		return literal(&p, "null") ? end(&p) : p.err;
	if (*p.s != '{')
		return *p.s ? "invalid character looking for beginning of value" : "unexpected end of JSON input";
	p.s++;
	ws(&p);
	if (*p.s == '}') {
		p.s++;
		return end(&p);
	}
	for (;;) {
		char *k = str(&p);
		if (!k)
			return p.err;
		ws(&p);
		if (*p.s != ':') {
			free(k);
			return *p.s ? "invalid character after object key" : "unexpected end of JSON input";
		}
		p.s++;
		char **sp = NULL;
		bool *bp = NULL, args = false;
		// The fields of internal/monitor's Config (monitor.json) or LoggerConfig (logger.json).
		if (keyeq(k, "log_path"))
			sp = &cfg->log_path;
		else if (keyeq(k, "log_dir"))
			sp = &cfg->log_dir;
		else if (keyeq(k, "stdin"))
			logger ? (void)(sp = &cfg->stdin_fifo) : (void)(bp = &cfg->stdin);
		else if (keyeq(k, "stdin_once"))
			bp = &cfg->stdin_once;
		else if (keyeq(k, "terminal"))
			bp = &cfg->terminal;
		else if (logger && keyeq(k, "stdout"))
			sp = &cfg->stdout_fifo;
		else if (logger && keyeq(k, "stderr"))
			sp = &cfg->stderr_fifo;
		else if (!logger && keyeq(k, "id"))
			sp = &cfg->id;
		else if (!logger && keyeq(k, "dir"))
			sp = &cfg->dir;
		else if (!logger && keyeq(k, "runtime"))
			sp = &cfg->runtime;
		else if (!logger && keyeq(k, "bundle"))
			sp = &cfg->bundle;
		else if (!logger && keyeq(k, "exec_fifo"))
			sp = &cfg->exec_fifo;
		else if (!logger && keyeq(k, "restore_image"))
			sp = &cfg->restore_image;
		else if (!logger && keyeq(k, "restore_work"))
			sp = &cfg->restore_work;
		else if (!logger && keyeq(k, "restore_lsm"))
			sp = &cfg->restore_lsm;
		else if (!logger && keyeq(k, "wait_with_runtime"))
			bp = &cfg->wait_with_runtime;
		else if (!logger && keyeq(k, "runtime_args"))
			args = true;
		if (sp)
			string_into(&p, sp);
		else if (bp)
			boolean(&p, bp);
		else if (args)
			array(&p, cfg);
		else
			skip(&p, 0);
		free(k);
		if (p.err)
			return p.err;
		ws(&p);
		if (*p.s == ',') {
			p.s++;
			continue;
		}
		if (*p.s == '}') {
			p.s++;
			return end(&p);
		}
		return *p.s ? "invalid character after object key:value pair" : "unexpected end of JSON input";
	}
}

// json_object_int reads the object in s as Unmarshal into a struct with one int field
// key: 0 with *v set, 1 when the key is absent or null (*v as it was), -1 on an error.
int json_object_int(const char *s, const char *key, long *v) {
	struct p p = {s, NULL};
	ws(&p);
	if (*p.s == 'n')
		return literal(&p, "null") && !end(&p) ? 1 : -1;
	if (*p.s != '{')
		return -1;
	p.s++;
	ws(&p);
	int found = 1;
	if (*p.s == '}') {
		p.s++;
		return end(&p) ? -1 : found;
	}
	for (;;) {
		char *k = str(&p);
		if (!k)
			return -1;
		ws(&p);
		if (*p.s != ':') {
			free(k);
			return -1;
		}
		p.s++;
		ws(&p);
		if (keyeq(k, key) && *p.s != 'n') {
			// An integer that fits an int: Go refuses a fraction, an exponent or overflow.
			const char *st = p.s;
			number(&p);
			if (p.err) {
				free(k);
				return -1;
			}
			char *e;
			errno = 0;
			long x = strtol(st, &e, 10);
			if (e != p.s || errno || x < INT_MIN || x > INT_MAX) {
				free(k);
				return -1;
			}
			*v = x;
			found = 0;
		} else {
			skip(&p, 0);
		}
		free(k);
		if (p.err)
			return -1;
		ws(&p);
		if (*p.s == ',') {
			p.s++;
			continue;
		}
		if (*p.s == '}') {
			p.s++;
			return end(&p) ? -1 : found;
		}
		return -1;
	}
}

size_t json_quote(char *out, size_t n, const char *s) {
	size_t l = 0;
	if (n < 3)
		return 0;
	out[l++] = '"';
	for (const unsigned char *c = (const unsigned char *)s; *c && l + 8 < n; c++) {
		switch (*c) {
		case '"': l += snprintf(out + l, n - l, "\\\""); break;
		case '\\': l += snprintf(out + l, n - l, "\\\\"); break;
		case '\n': l += snprintf(out + l, n - l, "\\n"); break;
		case '\r': l += snprintf(out + l, n - l, "\\r"); break;
		case '\t': l += snprintf(out + l, n - l, "\\t"); break;
		case '<': l += snprintf(out + l, n - l, "\\u003c"); break;
		case '>': l += snprintf(out + l, n - l, "\\u003e"); break;
		case '&': l += snprintf(out + l, n - l, "\\u0026"); break;
		default:
			if (*c < 0x20)
				l += snprintf(out + l, n - l, "\\u%04x", *c);
			else
				out[l++] = (char)*c;
		}
	}
	out[l++] = '"';
	out[l] = 0;
	return l;
}
