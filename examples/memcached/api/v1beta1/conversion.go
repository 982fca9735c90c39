package v1beta1

// Hub marks v1beta1 as the version every other converts to and from.
func (*Memcached) Hub() {}
