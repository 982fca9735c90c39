package s3_test

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/backup/s3"
)

func ExampleConfigFromSecret() {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-backup"},
		Data: map[string][]byte{
			"endpoint":        []byte("http://minio.minio.svc:9000"),
			"bucket":          []byte("db-backups"),
			"prefix":          []byte("shop/orders"),
			"accessKeyID":     []byte("orders"),
			"secretAccessKey": []byte("not-a-real-secret"),
			"pathStyle":       []byte("true"),
		},
	}
	cfg, err := s3.ConfigFromSecret(sec)
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := s3.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(store)

	// A Secret with a mistake: every problem is named with its fix.
	delete(sec.Data, "bucket")
	sec.Data["pathStyle"] = []byte("yes")
	_, err = s3.ConfigFromSecret(sec)
	fmt.Println(errors.Is(err, s3.ErrInvalidConfig))
	fmt.Println(err)
	// Output:
	// s3://db-backups/shop/orders/ at http://minio.minio.svc:9000
	// true
	// Secret shop/orders-backup: key "pathStyle" is "yes", not a boolean; set it to "true" or "false"
	// Secret shop/orders-backup: key "bucket" is missing; set it to the name of an existing bucket
}
