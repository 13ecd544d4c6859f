package modern

import "testing"

func TestCanonicalNumber(t *testing.T) {
	equal := [][]string{
		{"10", "1e1", "1E+1", "10.0", "1.0e1", "100e-1", "0.1e2"},
		{"0", "-0", "0.0", "0e5", "-0.000e-3"},
		{"-9007199254740991", "-9.007199254740991e15"},
		{"1.5", "15e-1", "0.15E1"},
	}
	for _, group := range equal {
		want, ok := canonicalNumber(group[0])
		if !ok {
			t.Fatalf("canonicalNumber(%q) failed", group[0])
		}
		for _, s := range group[1:] {
			if got, ok := canonicalNumber(s); !ok || got != want {
				t.Errorf("canonicalNumber(%q) = %q, %v; want %q like %q", s, got, ok, want, group[0])
			}
		}
	}
	if a, _ := canonicalNumber("10"); a == func() string { b, _ := canonicalNumber("100"); return b }() {
		t.Error("10 and 100 share a canonical form")
	}
	for _, s := range []string{"", "-", "+1", "01", "-01", "1.", ".5", "1e", "1e+", "1e+-5", "1e--5", "0x10", "1_000", "NaN", "1e99999999999", "1 ", "ten"} {
		if got, ok := canonicalNumber(s); ok {
			t.Errorf("canonicalNumber(%q) = %q, want it refused", s, got)
		}
	}
}

func TestDecimalInteger(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"42", "42", true},
		{"-3", "-3", true},
		{"1e1", "10", true},
		{"2.50e1", "25", true},
		{"0.0", "0", true},
		{"-0", "0", true},
		{"9007199254740991", "9007199254740991", true},
		{"1.5", "", false},
		{"1e30", "", false},
		{"1e-1", "", false},
		{"x", "", false},
	}
	for _, tt := range tests {
		if got, ok := decimalInteger(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("decimalInteger(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
