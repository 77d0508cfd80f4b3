package tool

import "unicode/utf8"

// parseSimpleArgs reads the arguments of a search call without encoding/json when they take the
// plain form nearly every call has: an object holding "query" (a string without escapes) and
// optionally "k" (an integer of at most 9 digits), each key once and spelled exactly so, with
// JSON whitespace around the tokens and nothing after the object. On that form it gives exactly
// what decoding into searchArgs gives. Anything else (escapes, invalid UTF-8, other keys, case
// variants or repeats of the keys, null, numbers with fractions or exponents) reports ok false,
// and the caller decodes with encoding/json, which also words the error a malformed call gets.
func parseSimpleArgs(raw []byte) (query string, k int, hasK, ok bool) {
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] != '{' {
		return "", 0, false, false
	}
	hasQuery := false
	for {
		// i is at the '{' or ',' before a key.
		i = skipSpace(raw, i+1)
		key, next, good := simpleString(raw, i)
		if !good {
			return "", 0, false, false
		}
		i = skipSpace(raw, next)
		if i == len(raw) || raw[i] != ':' {
			return "", 0, false, false
		}
		i = skipSpace(raw, i+1)
		switch string(key) {
		case "query":
			if hasQuery {
				return "", 0, false, false
			}
			val, next, good := simpleString(raw, i)
			if !good {
				return "", 0, false, false
			}
			query, hasQuery, i = string(val), true, next
		case "k":
			if hasK {
				return "", 0, false, false
			}
			n, next, good := simpleInt(raw, i)
			if !good {
				return "", 0, false, false
			}
			k, hasK, i = n, true, next
		default:
			return "", 0, false, false
		}
		i = skipSpace(raw, i)
		if i == len(raw) {
			return "", 0, false, false
		}
		if raw[i] == '}' {
			break
		}
		if raw[i] != ',' {
			return "", 0, false, false
		}
	}
	if skipSpace(raw, i+1) != len(raw) || !hasQuery {
		return "", 0, false, false
	}
	return query, k, hasK, true
}

// skipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// simpleString reads a JSON string at b[i] that has no escapes and is valid UTF-8, and returns
// its contents (which decode to themselves) and the index after the closing quote.
func simpleString(b []byte, i int) (val []byte, next int, ok bool) {
	if i == len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			val = b[i+1 : j]
			return val, j + 1, utf8.Valid(val)
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// simpleInt reads a JSON integer of at most 9 digits at b[i] (so it fits any int) and returns it
// and the index after it. A fraction or exponent after the digits is not accepted.
func simpleInt(b []byte, i int) (n, next int, ok bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	j := i
	for j < len(b) && '0' <= b[j] && b[j] <= '9' {
		n = n*10 + int(b[j]-'0')
		j++
	}
	digits := j - i
	if digits == 0 || digits > 9 || (digits > 1 && b[i] == '0') {
		return 0, 0, false
	}
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, 0, false
	}
	if neg {
		n = -n
	}
	return n, j, true
}
