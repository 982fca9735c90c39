package s3

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7/pkg/s3utils"
	corev1 "k8s.io/api/core/v1"
)

// Keys read from the Secret by [ConfigFromSecret].
const (
	// SecretKeyEndpoint is the endpoint URL with scheme, e.g.
	// "https://s3.eu-west-1.amazonaws.com" or "http://minio.minio.svc:9000".
	// Required.
	SecretKeyEndpoint = "endpoint"
	// SecretKeyBucket is the bucket name. Required; the bucket must exist.
	SecretKeyBucket = "bucket"
	// SecretKeyPrefix is an optional key prefix ("folder") in the bucket.
	SecretKeyPrefix = "prefix"
	// SecretKeyAccessKeyID is the access key ID. Required.
	SecretKeyAccessKeyID = "accessKeyID"
	// SecretKeySecretAccessKey is the secret access key. Required.
	SecretKeySecretAccessKey = "secretAccessKey"
	// SecretKeySessionToken is an optional session token for temporary
	// credentials.
	SecretKeySessionToken = "sessionToken"
	// SecretKeyRegion is the optional region; empty means discover it from
	// the bucket.
	SecretKeyRegion = "region"
	// SecretKeyPathStyle is "true" to address the bucket as a path
	// (endpoint/bucket/key), as most S3-compatible servers need; "false" or
	// absent chooses automatically (virtual-hosted style for AWS).
	SecretKeyPathStyle = "pathStyle"
)

// ErrInvalidConfig is matched by every [*ConfigError].
var ErrInvalidConfig = errors.New("invalid S3 store configuration")

// ConfigError names one invalid or missing configuration value and the fix.
type ConfigError struct {
	// Secret is "namespace/name" of the Secret the value came from, empty
	// for a Config built in code.
	Secret string
	// Key is the Secret key (or Config field) at fault.
	Key string
	// Problem says what is wrong.
	Problem string
	// Fix says how to correct it.
	Fix string
}

// Error implements error.
func (e *ConfigError) Error() string {
	where := "S3 store config"
	if e.Secret != "" {
		where = "Secret " + e.Secret
	}
	return fmt.Sprintf("%s: key %q %s; %s", where, e.Key, e.Problem, e.Fix)
}

// Unwrap returns [ErrInvalidConfig].
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Config locates and authenticates an S3 bucket.
type Config struct {
	// Endpoint is the URL of the S3 API with scheme http or https and no
	// path.
	Endpoint string
	// Bucket is the name of an existing bucket.
	Bucket string
	// Prefix is prepended to every key; a trailing "/" is added if missing.
	Prefix string
	// AccessKeyID and SecretAccessKey are static credentials.
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken is set for temporary credentials.
	SessionToken string
	// Region is the bucket's region; empty discovers it.
	Region string
	// PathStyle forces path-style bucket addressing.
	PathStyle bool
}

// String describes c without its credentials, so that a Config can be logged.
func (c Config) String() string {
	secret := ""
	if c.SecretAccessKey != "" {
		secret = "<redacted>"
	}
	token := ""
	if c.SessionToken != "" {
		token = "<redacted>"
	}
	return fmt.Sprintf("{Endpoint:%s Bucket:%s Prefix:%s AccessKeyID:%s SecretAccessKey:%s SessionToken:%s Region:%s PathStyle:%t}",
		redactEndpoint(c.Endpoint), c.Bucket, c.Prefix, c.AccessKeyID, secret, token, c.Region, c.PathStyle)
}

// GoString is String, so that %#v does not print the credentials either.
func (c Config) GoString() string { return "s3.Config" + c.String() }

// ConfigFromSecret reads a Config from the keys of s (see
// [SecretKeyEndpoint] and the other SecretKey constants) and validates it.
// All problems are reported at once, each as a [*ConfigError] naming the key
// and the fix.
func ConfigFromSecret(s *corev1.Secret) (Config, error) {
	if s == nil {
		return Config{}, errors.New("S3 store config: Secret is nil")
	}
	ref := s.Namespace + "/" + s.Name
	get := func(k string) string {
		if v, ok := s.Data[k]; ok {
			return strings.TrimSpace(string(v))
		}
		return strings.TrimSpace(s.StringData[k])
	}
	c := Config{
		Endpoint:        get(SecretKeyEndpoint),
		Bucket:          get(SecretKeyBucket),
		Prefix:          get(SecretKeyPrefix),
		AccessKeyID:     get(SecretKeyAccessKeyID),
		SecretAccessKey: get(SecretKeySecretAccessKey),
		SessionToken:    get(SecretKeySessionToken),
		Region:          get(SecretKeyRegion),
	}
	var errs []error
	if ps := get(SecretKeyPathStyle); ps != "" {
		b, err := strconv.ParseBool(ps)
		if err != nil {
			errs = append(errs, &ConfigError{Secret: ref, Key: SecretKeyPathStyle, Problem: fmt.Sprintf("is %q, not a boolean", ps), Fix: `set it to "true" or "false"`})
		}
		c.PathStyle = b
	}
	errs = append(errs, c.validate(ref)...)
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c.normalized(), nil
}

// Validate reports every invalid field as a [*ConfigError].
func (c Config) Validate() error {
	return errors.Join(c.validate("")...)
}

func (c Config) validate(secret string) []error {
	var errs []error
	bad := func(key, problem, fix string) {
		errs = append(errs, &ConfigError{Secret: secret, Key: key, Problem: problem, Fix: fix})
	}
	if c.Endpoint == "" {
		bad(SecretKeyEndpoint, "is missing", "set it to the S3 API URL, e.g. https://s3.eu-west-1.amazonaws.com or http://minio.minio.svc:9000")
	} else if _, _, err := parseEndpoint(c.Endpoint); err != nil {
		bad(SecretKeyEndpoint, fmt.Sprintf("is %q: %v", redactEndpoint(c.Endpoint), err), "set it to a URL with scheme http or https, a host, and no path, e.g. https://s3.eu-west-1.amazonaws.com; credentials go in accessKeyID and secretAccessKey, never in the URL")
	}
	if c.Bucket == "" {
		bad(SecretKeyBucket, "is missing", "set it to the name of an existing bucket")
	} else if err := s3utils.CheckValidBucketNameStrict(c.Bucket); err != nil {
		bad(SecretKeyBucket, fmt.Sprintf("is %q: %v", c.Bucket, err), "use 3-63 lowercase letters, digits, '.' and '-'")
	}
	if p := strings.Trim(c.Prefix, "/"); p != "" {
		for seg := range strings.SplitSeq(p, "/") {
			if seg == "" || seg == "." || seg == ".." {
				bad(SecretKeyPrefix, fmt.Sprintf("is %q, with an empty, '.' or '..' segment", c.Prefix), "use a path like team/db")
				break
			}
		}
	}
	if c.AccessKeyID == "" {
		bad(SecretKeyAccessKeyID, "is missing", "set it to the access key ID of a user allowed to read, write, list and delete in the bucket")
	}
	if c.SecretAccessKey == "" {
		bad(SecretKeySecretAccessKey, "is missing", "set it to the secret access key belonging to accessKeyID")
	}
	return errs
}

// normalized returns c with a prefix that is empty or ends in exactly one
// "/" and has no leading "/".
func (c Config) normalized() Config {
	c.Prefix = strings.Trim(c.Prefix, "/")
	if c.Prefix != "" {
		c.Prefix += "/"
	}
	return c
}

// redactEndpoint is e with anything that may be user info (before the last
// "@") replaced, for messages: an endpoint is validated, and so quoted,
// before anyone knows whether it carries credentials.
func redactEndpoint(e string) string {
	at := strings.LastIndex(e, "@")
	if at < 0 {
		return e
	}
	start := 0
	if i := strings.Index(e[:at], "://"); i >= 0 {
		start = i + len("://")
	}
	return e[:start] + "<redacted>" + e[at:]
}

// parseEndpoint returns host[:port] and whether to use TLS. Its errors do
// not quote e (see redactEndpoint).
func parseEndpoint(e string) (host string, secure bool, err error) {
	u, err := url.Parse(e)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error quotes the whole URL
		}
		return "", false, fmt.Errorf("not a URL: %w", err)
	}
	switch u.Scheme {
	case "https":
		secure = true
	case "http":
	default:
		return "", false, errors.New("scheme must be http or https")
	}
	if u.Host == "" {
		return "", false, errors.New("host is missing")
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", false, errors.New("must not have a path, query, fragment or user info")
	}
	return u.Host, secure, nil
}
