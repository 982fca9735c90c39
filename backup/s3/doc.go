// Package s3 is a [backup.Store] on any S3-compatible object store (AWS S3,
// MinIO, Ceph RGW, versitygw, ...), built on github.com/minio/minio-go/v7. It
// is a separate package so that programs using only the filesystem store do
// not link an S3 SDK.
//
// Configure it from a Kubernetes Secret with [ConfigFromSecret]; the keys are
// listed at [SecretKeyEndpoint] and below. A Secret for an in-cluster MinIO:
//
//	apiVersion: v1
//	kind: Secret
//	metadata: {name: backup-s3}
//	stringData:
//	  endpoint: http://minio.minio.svc:9000
//	  bucket: db-backups
//	  prefix: prod/orders
//	  accessKeyID: ...
//	  secretAccessKey: ...
//	  pathStyle: "true"
//
// Put streams with multipart upload and bounded memory: at most
// part size × concurrency bytes of buffers per upload (8 MiB × 2 by default),
// whatever the size of the backup. The maximum object size is
// part size × 10000 parts (78 GiB by default); raise [WithPartSize] for
// bigger databases. Objects smaller than one small-object threshold (1 MiB)
// are written with a single PUT. Either way an object becomes visible only
// when complete. An upload that fails or is cancelled is aborted; one whose
// process died is an unfinished multipart upload that [Store.CleanIncomplete]
// (called by [backup.Prune]) aborts after the grace period. A bucket
// lifecycle rule "AbortIncompleteMultipartUpload" is a good second line of
// defence.
//
// Footguns: over plain http the credentials' signatures still protect the
// requests, and by default every 64 KiB of the body is signed too, which
// costs CPU on both ends ([WithUnsignedPayload] turns that off for a trusted
// network); use https outside a trusted network. Errors from an
// unreachable endpoint wrap [backup.ErrStoreUnavailable]; minio-go retries
// them first ([WithMaxRetries]).
package s3
