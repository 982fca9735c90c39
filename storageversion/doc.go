// Package storageversion rewrites a CRD's stored objects at its storage
// version and trims status.storedVersions to it: the step between making a
// new API version the storage version and removing the old one, which the
// API server refuses while storedVersions lists it.
//
//	res, err := storageversion.Migrate(ctx, mgr.GetConfig(), "memcacheds.cache.opkit.dev")
//
// Each object gets an empty merge patch: the API server reads it, converts
// it and writes it back at the storage version, or writes nothing when it
// is stored at that version already. An operator can run Migrate on each
// start; once storedVersions is trimmed it reads only the CRD. Replicas
// may run it at once (sharded, with no leader election): each object is
// written once between them (their Results may each count it).
package storageversion
