package session

// ownerOf names who rec counts against for the stores' per-owner caps: its principal
// (Principal.Key) when it has one, else its client address, else no one (""). The two kinds
// are told apart by their prefix, so that no principal shares a count with an address.
// anonymous reports which cap applies: MaxPerAnonymousAddr if true, else MaxPerPrincipal.
func ownerOf(rec *Record) (owner string, anonymous bool) {
	if k := rec.Principal.Key(); k != "" {
		return "principal\x00" + k, false
	}
	if rec.ClientAddr != "" {
		return "addr\x00" + rec.ClientAddr, true
	}
	return "", true
}

// ownerCap returns rec's owner (ownerOf) and the cap of its kind, of perPrincipal and
// perAnonymousAddr; "" and 0 when rec has no owner or its kind has no cap (zero or less).
func ownerCap(rec *Record, perPrincipal, perAnonymousAddr int) (string, int) {
	owner, anonymous := ownerOf(rec)
	limit := perPrincipal
	if anonymous {
		limit = perAnonymousAddr
	}
	if owner == "" || limit <= 0 {
		return "", 0
	}
	return owner, limit
}
