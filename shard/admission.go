package shard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// WebhookPath is where SetupWebhookWithManager serves the ring's
// labelling webhook: /label-slot-<Name>.
func (r Ring) WebhookPath() string { return "/label-slot-" + r.Name }

// SetupWebhookWithManager serves, on mgr's webhook server at
// WebhookPath, a mutating webhook that writes a new object's slot into
// its SlotLabel as it is created, so that the Sharder need not patch it
// after: one write and two watch events fewer per object. Any replica
// may serve it; it reads nothing.
//
// Its MutatingWebhookConfiguration is the installer's: CREATE of the
// sharded kind, objectSelector SlotLabel DoesNotExist, failurePolicy
// Ignore, sideEffects None. An object admitted while no replica serves
// it, or created with generateName (nameless at admission), is labelled
// by the Sharder as before.
func (r Ring) SetupWebhookWithManager(mgr ctrl.Manager) error {
	if r.Name == "" {
		return errors.New("shard: Ring.Name is empty: name the ring, which names the webhook's path")
	}
	mgr.GetWebhookServer().Register(r.WebhookPath(), r.webhook())
	return nil
}

func (r Ring) webhook() *admission.Webhook {
	return &admission.Webhook{Handler: slotWriter{ring: r}}
}

type slotWriter struct{ ring Ring }

// Handle adds the slot label to an object being created that lacks a
// valid one.
func (w slotWriter) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	key := types.NamespacedName{Namespace: cmp.Or(obj.Namespace, req.Namespace), Name: cmp.Or(obj.Name, req.Name)}
	switch {
	case key.Name == "":
		return admission.Allowed("no name yet: the Sharder labels it")
	case len(w.ring.Namespaces) > 0 && !slices.Contains(w.ring.Namespaces, key.Namespace):
		return admission.Allowed("")
	}
	if _, ok := w.ring.slotOf(obj.Labels); ok {
		return admission.Allowed("")
	}
	slot := strconv.Itoa(w.ring.Slot(key))
	if obj.Labels == nil {
		return admission.Patched("", jsonpatch.NewOperation("add", "/metadata/labels", map[string]string{w.ring.SlotLabel(): slot}))
	}
	// RFC 6901: "~" and "/" in a key are escaped.
	path := "/metadata/labels/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(w.ring.SlotLabel())
	return admission.Patched("", jsonpatch.NewOperation("add", path, slot))
}
