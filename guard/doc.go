// Package guard keeps the children that hold an object's data until the
// object's finalizer says they may go, whatever deletes the object.
//
// A finalizer alone does not: under foreground deletion the garbage
// collector deletes the children while the finalizer still runs, orphan
// deletion strips their owner, and deleting the namespace deletes them
// directly. A guard is a ConfigMap, one per owner, that is a second owner
// of every held child, so the garbage collector keeps them while it
// exists, and the parameter of a ValidatingAdmissionPolicy (Policy) that
// refuses to delete them while their namespace is being deleted. Release,
// called last by the owner's Finalize, deletes the guard; the children
// then go with it, unless the owner was deleted with orphan propagation
// (see AnnotationMarker).
//
// Typical use: Ensure before creating any child, Hold on each child that
// holds data, Release at the end of Finalize, and a Collector for guards
// whose owner went without its finalizer. Install Policy with the operator.
package guard
