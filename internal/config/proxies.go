package config

import (
	"net/netip"
	"strings"
)

// ParseTrustedProxy reads an entry of trusted_proxies: a CIDR, like 10.0.0.0/8, or one
// address, like 10.0.0.7 or ::1, which stands for itself alone. An IPv4 address written in
// IPv6 form (::ffff:10.0.0.7) is taken as the IPv4 one, as the gateway compares addresses.
func ParseTrustedProxy(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// TrustedProxyPrefixes returns TrustedProxies parsed (ParseTrustedProxy); an entry that does
// not parse, which validation refuses, is left out.
func (c *Config) TrustedProxyPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range c.TrustedProxies {
		if p, err := ParseTrustedProxy(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}
