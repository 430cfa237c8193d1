package grammar

// Number phases: 0 before the number; 1 after '-'; 2 after a leading 0;
// 3 in the integer digits (i of them, value v); 4 after '.'; 5 in the
// fraction (j digits); 6 after 'e'; 7 after the exponent's sign; 8 in the
// exponent (j digits). A number ends at the first byte that cannot continue
// it, which is then fed to the enclosing value.
func feedNumber(f *frame, b byte, out []*frame) []*frame {
	n := f.n
	switch f.phase {
	case 0, 1:
		if b == '-' && f.phase == 0 && n.lo < 0 {
			c := f.with(1)
			c.neg = true
			return append(out, c)
		}
		if !isDigit(b) || (b == '0' && f.phase == 1) {
			return out
		}
		c := *f
		c.v, c.i = int64(b-'0'), 1
		c.phase = 3
		if b == '0' {
			c.phase = 2
		}
		if !viable(n, &c) {
			return out
		}
		return append(out, &c)
	case 2, 3:
		if isDigit(b) && f.phase == 3 && f.i < maxIntDigits {
			c := *f
			c.v = f.v*10 + int64(b-'0')
			c.i++
			if !viable(n, &c) {
				return out
			}
			return append(out, &c)
		}
		if b == '.' && fracAllowed(n, f) {
			return append(out, f.with(4))
		}
		if (b == 'e' || b == 'E') && !n.integer && !n.bounded && inRange(n, f) {
			c := f.with(6)
			c.j = 0
			return append(out, c)
		}
	case 4:
		if isDigit(b) {
			c := f.with(5)
			c.j = 1
			return append(out, c)
		}
		return out
	case 5:
		if isDigit(b) && f.j < maxFracDigits {
			c := *f
			c.j++
			return append(out, &c)
		}
		if (b == 'e' || b == 'E') && !n.bounded {
			c := f.with(6)
			c.j = 0
			return append(out, c)
		}
	case 6, 7:
		if (b == '+' || b == '-') && f.phase == 6 {
			return append(out, f.with(7))
		}
		if isDigit(b) {
			c := f.with(8)
			c.j = 1
			return append(out, c)
		}
		return out
	case 8:
		if isDigit(b) && f.j < maxExpDigits {
			c := *f
			c.j++
			return append(out, &c)
		}
	}
	if numberTerminal(f) {
		return feed(advance(f.up), b, out)
	}
	return out
}

// numberTerminal reports whether the number read so far is a whole number
// the node allows.
func numberTerminal(f *frame) bool {
	switch f.phase {
	case 2, 3:
		return inRange(f.n, f)
	case 5, 8:
		return true // fracAllowed or an unbounded exponent checked the range
	}
	return false
}

func signed(f *frame) int64 {
	if f.neg {
		return -f.v
	}
	return f.v
}

// inRange reports whether the integer part read so far is itself allowed.
func inRange(n *node, f *frame) bool {
	v := signed(f)
	return v >= n.lo && v <= n.hi
}

// fracAllowed reports whether any fraction may follow the integer part: every
// value strictly between it and the next integer away from zero is in range.
func fracAllowed(n *node, f *frame) bool {
	if n.integer || !n.fracOpen {
		return false
	}
	v := float64(signed(f))
	if f.neg {
		return v-1 >= n.fracLo && v <= n.fracHi
	}
	return v >= n.fracLo && v+1 <= n.fracHi
}

// viable reports whether some whole number that begins with the integer
// digits read so far is in range.
func viable(n *node, f *frame) bool {
	if inRange(n, f) || fracAllowed(n, f) {
		return true
	}
	if f.phase == 2 { // a leading 0 is the whole integer part
		return false
	}
	lo, span := f.v, int64(1)
	for d := f.i; d < maxIntDigits; d++ {
		lo *= 10
		span *= 10
		a, b := lo, lo+span-1
		if f.neg {
			a, b = -b, -a
		}
		if b >= n.lo && a <= n.hi {
			return true
		}
	}
	return false
}
