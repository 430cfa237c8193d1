package router

// lru is a bounded map that forgets its least recently used entries, in two
// generations: entries go into cur; when cur holds half the bound it becomes
// old and a new cur starts; a look-up that finds an entry in old moves it to
// cur. So at most max entries are kept, and one used within the last
// max/2 insertions is never forgotten.
type lru[K comparable, V any] struct {
	cur, old map[K]V
	half     int
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{cur: map[K]V{}, old: map[K]V{}, half: (max + 1) / 2}
}

func (l *lru[K, V]) get(k K) (V, bool) {
	if v, ok := l.cur[k]; ok {
		return v, true
	}
	v, ok := l.old[k]
	if ok {
		delete(l.old, k)
		l.put(k, v)
	}
	return v, ok
}

func (l *lru[K, V]) put(k K, v V) {
	if _, ok := l.cur[k]; !ok && len(l.cur) >= l.half {
		l.old, l.cur = l.cur, make(map[K]V, l.half)
	}
	l.cur[k] = v
}
