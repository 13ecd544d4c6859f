package auth

// ForgetVerified empties the cache of verified tokens, for benchmarks of first uses.
func (a *Authenticator) ForgetVerified() {
	a.verified.mu.Lock()
	a.verified.entries = nil
	a.verified.mu.Unlock()
}
