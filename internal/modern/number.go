package modern

import (
	"strconv"
	"strings"
)

// A decimal number in the JSON grammar, as a header or argument carries it, compared by value
// without arithmetic on its size: a number written with a huge exponent costs no more than
// its text.

// canonicalNumber returns s, a JSON number, in a form that two numbers of equal value share
// ("-" sign, significant digits, "e", exponent), or ok=false when s is not a JSON number.
func canonicalNumber(s string) (string, bool) {
	neg, digits, exp, ok := splitNumber(s)
	if !ok {
		return "", false
	}
	return signed(neg, digits, "e"+strconv.Itoa(exp)), true
}

// decimalInteger returns s, a JSON number of integral value, in plain decimal, when that
// takes at most 20 digits.
func decimalInteger(s string) (string, bool) {
	neg, digits, exp, ok := splitNumber(s)
	if !ok || exp < 0 || len(digits)+exp > 20 {
		return "", false
	}
	return signed(neg, digits, strings.Repeat("0", exp)), true
}

// signed writes the significant digits of a number with its sign and what follows them;
// zero, whatever its sign, is "0".
func signed(neg bool, digits, tail string) string {
	switch {
	case digits == "":
		return "0"
	case neg:
		return "-" + digits + tail
	}
	return digits + tail
}

// splitNumber parses s, a JSON number, into its sign, its significant digits (no leading or
// trailing zeros; "" for zero) and the power of ten they are multiplied by.
func splitNumber(s string) (neg bool, digits string, exp int, ok bool) {
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	intPart := leadingDigits(s)
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return false, "", 0, false
	}
	s = s[len(intPart):]
	frac := ""
	if strings.HasPrefix(s, ".") {
		frac = leadingDigits(s[1:])
		if frac == "" {
			return false, "", 0, false
		}
		s = s[1+len(frac):]
	}
	if s != "" {
		if s[0] != 'e' && s[0] != 'E' {
			return false, "", 0, false
		}
		e := s[1:]
		expNeg := false
		if e != "" && (e[0] == '+' || e[0] == '-') {
			expNeg, e = e[0] == '-', e[1:]
		}
		if e == "" || leadingDigits(e) != e {
			return false, "", 0, false
		}
		n, err := strconv.Atoi(e)
		if err != nil || n > 1<<30 {
			return false, "", 0, false
		}
		if expNeg {
			n = -n
		}
		exp = n
	}
	digits = strings.TrimLeft(intPart+frac, "0")
	exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	if trimmed == "" {
		exp = 0
	}
	return neg, trimmed, exp, true
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}
