#include "json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

// str reads a string; the result is malloc'd (NULL on error, p->err set).
static char *str(struct p *p) {
	ws(p);
	if (*p->s != '"') {
		p->err = "expected a string";
		return NULL;
	}
	p->s++;
	const char *start = p->s;
	size_t n = 0;
	while (*p->s && *p->s != '"') {
		if (*p->s == '\\' && p->s[1])
			p->s++;
		p->s++;
		n++;
	}
	if (*p->s != '"') {
		p->err = "unexpected end of JSON input";
		return NULL;
	}
	char *out = malloc(n * 4 + 1), *o = out;
	for (const char *c = start; c < p->s; c++) {
		if (*c != '\\') {
			*o++ = *c;
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
				p->err = "invalid \\u escape";
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
	} else if (c) {
		const char *st = p->s;
		while (*p->s && strchr("+-0123456789.eEtruefalsn", *p->s))
			p->s++;
		if (p->s == st)
			p->err = "invalid character";
	} else {
		p->err = "unexpected end of JSON input";
	}
}

static bool boolean(struct p *p) {
	ws(p);
	if (strncmp(p->s, "true", 4) == 0) {
		p->s += 4;
		return true;
	}
	if (strncmp(p->s, "false", 5) == 0) {
		p->s += 5;
		return false;
	}
	if (strncmp(p->s, "null", 4) == 0) {
		p->s += 4;
		return false;
	}
	p->err = "expected a boolean";
	return false;
}

static char *str_or_null(struct p *p) {
	ws(p);
	if (strncmp(p->s, "null", 4) == 0) {
		p->s += 4;
		return NULL;
	}
	return str(p);
}

static void array(struct p *p, struct json_config *cfg) {
	ws(p);
	if (strncmp(p->s, "null", 4) == 0) {
		p->s += 4;
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
		cfg->runtime_args = realloc(cfg->runtime_args, sizeof(char *) * (cfg->runtime_nargs + 1));
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

const char *json_parse_config(const char *s, struct json_config *cfg, bool logger) {
	struct p p = {s, NULL};
	ws(&p);
	if (*p.s != '{')
		return *p.s ? "invalid character looking for beginning of value" : "unexpected end of JSON input";
	p.s++;
	ws(&p);
	if (*p.s == '}')
		return NULL;
	for (;;) {
		char *k = str(&p);
		if (!k)
			return p.err;
		ws(&p);
		if (*p.s != ':') {
			free(k);
			return "expected ':'";
		}
		p.s++;
		char **sp = NULL;
		bool *bp = NULL;
		if (!strcmp(k, "id"))
			sp = &cfg->id;
		else if (!strcmp(k, "dir"))
			sp = &cfg->dir;
		else if (!strcmp(k, "runtime"))
			sp = &cfg->runtime;
		else if (!strcmp(k, "bundle"))
			sp = &cfg->bundle;
		else if (!strcmp(k, "log_path"))
			sp = &cfg->log_path;
		else if (!strcmp(k, "log_dir"))
			sp = &cfg->log_dir;
		else if (!strcmp(k, "stdin"))
			logger ? (void)(sp = &cfg->stdin_fifo) : (void)(bp = &cfg->stdin);
		else if (logger && !strcmp(k, "stdout"))
			sp = &cfg->stdout_fifo;
		else if (logger && !strcmp(k, "stderr"))
			sp = &cfg->stderr_fifo;
		else if (!strcmp(k, "wait_with_runtime"))
			bp = &cfg->wait_with_runtime;
		else if (!strcmp(k, "stdin_once"))
			bp = &cfg->stdin_once;
		else if (!strcmp(k, "terminal"))
			bp = &cfg->terminal;
		if (sp) {
			free(*sp);
			*sp = str_or_null(&p);
		} else if (bp) {
			*bp = boolean(&p);
		} else if (!strcmp(k, "runtime_args")) {
			array(&p, cfg);
		} else {
			skip(&p, 0);
		}
		free(k);
		if (p.err)
			return p.err;
		ws(&p);
		if (*p.s == ',') {
			p.s++;
			continue;
		}
		if (*p.s == '}')
			return NULL;
		return "expected ',' or '}'";
	}
}

int json_object_int(const char *s, const char *key, long *v) {
	struct p p = {s, NULL};
	ws(&p);
	if (*p.s != '{')
		return -1;
	p.s++;
	ws(&p);
	if (*p.s == '}')
		return -1;
	int found = -1;
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
		if (!strcmp(k, key)) {
			char *end;
			long x = strtol(p.s, &end, 10);
			if (end == p.s) {
				free(k);
				return -1;
			}
			*v = x;
			found = 0;
		}
		skip(&p, 0);
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
			ws(&p);
			return *p.s ? -1 : found == 0 ? 0 : 1; // absent: the zero value, as Unmarshal
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
