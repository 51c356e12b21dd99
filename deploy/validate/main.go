// Command validate checks rendered Kubernetes manifests (the output of `helm
// template`) strictly, without a cluster:
//
//	helm template deploy/helm/sealvol -f values.yaml | validate
//
// Every document of the YAML stream on stdin is decoded with client-go's
// scheme in strict mode (an unknown or duplicate field fails) into the typed
// object of its apiVersion and kind; a kind the scheme does not know fails.
// Then the checks that are importable without k8s.io/kubernetes run: object
// metadata (names as the API server wants them for the kind, namespace,
// labels, annotations) through k8s.io/apimachinery's validation, and a
// subset of the API server's rules for pods, workloads, Services,
// ConfigMaps, claims and RuntimeClasses written out here from
// k8s.io/apimachinery/pkg/util/validation (container, port, volume and env
// names; mounts naming volumes; one source per volume; selectors matching
// their templates; probes naming declared ports; privileged containers and
// allowPrivilegeEscalation; ...). Across documents, a workload's
// non-optional ConfigMap volumes must name a ConfigMap of the stream, and
// a Service's selector must select a workload's pods.
//
// monitoring.coreos.com/v1 ServiceMonitors are not in client-go's scheme:
// they are checked to be YAML without duplicate keys with apiVersion, kind
// and a valid metadata.name (and that their selector and port name a
// Service of the stream), and listed as "not schema-checked".
//
// It exits 1 naming each failing document's kind/name and the error.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"reflect"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"
)

// doc is one decoded document of the stream.
type doc struct {
	index int
	kind  string
	name  string
	obj   runtime.Object
	// raw holds ServiceMonitors, which have no typed object.
	raw map[string]any
}

func (d *doc) String() string { return fmt.Sprintf("document %d (%s/%s)", d.index, d.kind, d.name) }

func main() {
	docs, failures := decodeAll(os.Stdin)
	for _, d := range docs {
		for _, err := range validateDoc(d) {
			failures = append(failures, fmt.Sprintf("%s: %s", d, err))
		}
	}
	for _, err := range crossChecks(docs) {
		failures = append(failures, err)
	}

	var checked, unchecked []string
	for _, d := range docs {
		if d.obj != nil {
			checked = append(checked, d.kind+"/"+d.name)
		} else {
			unchecked = append(unchecked, d.kind+"/"+d.name)
		}
	}
	if len(failures) > 0 {
		for _, f := range failures {
			fmt.Fprintln(os.Stderr, "validate: "+f)
		}
		os.Exit(1)
	}
	if len(docs) == 0 {
		fmt.Fprintln(os.Stderr, "validate: no documents on stdin")
		os.Exit(1)
	}
	fmt.Printf("schema-checked (%d): %s\n", len(checked), strings.Join(checked, " "))
	if len(unchecked) > 0 {
		fmt.Printf("not schema-checked (%d): %s\n", len(unchecked), strings.Join(unchecked, " "))
	}
}

// decodeAll splits the stream and decodes every non-empty document.
func decodeAll(r io.Reader) ([]*doc, []string) {
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	decoder := codecs.UniversalDeserializer()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var docs []*doc
	var failures []string
	for i := 1; ; i++ {
		data, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("document %d: reading: %v", i, err))
			break
		}
		var generic map[string]any
		if err := sigsyaml.Unmarshal(data, &generic); err != nil {
			failures = append(failures, fmt.Sprintf("document %d: %v", i, err))
			continue
		}
		if len(generic) == 0 { // only comments (helm's "# Source:")
			i--
			continue
		}
		apiVersion, _ := generic["apiVersion"].(string)
		kind, _ := generic["kind"].(string)
		name := ""
		if m, ok := generic["metadata"].(map[string]any); ok {
			name, _ = m["name"].(string)
		}
		d := &doc{index: i, kind: kind, name: name}
		// Duplicate keys anywhere fail, also in kinds without a scheme.
		if err := sigsyaml.UnmarshalStrict(data, &generic); err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", d, err))
			continue
		}
		if apiVersion == "" || kind == "" || name == "" {
			failures = append(failures, fmt.Sprintf("%s: apiVersion, kind and metadata.name are required", d))
			continue
		}
		if apiVersion == "monitoring.coreos.com/v1" && kind == "ServiceMonitor" {
			d.raw = generic
			docs = append(docs, d)
			continue
		}
		obj, gvk, err := decoder.Decode(data, nil, nil)
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: strict decoding as %s: %v", d, apiVersion, err))
			continue
		}
		if gvk.GroupVersion().String() != apiVersion || gvk.Kind != kind {
			failures = append(failures, fmt.Sprintf("%s: decoded as %s", d, gvk))
			continue
		}
		d.obj = obj
		docs = append(docs, d)
	}
	return docs, failures
}

func validateDoc(d *doc) field.ErrorList {
	if d.obj == nil {
		return validateServiceMonitor(d.raw)
	}
	switch o := d.obj.(type) {
	case *corev1.Pod:
		errs := meta(&o.ObjectMeta, true, apivalidation.NameIsDNSSubdomain)
		return append(errs, validatePodSpec(&o.Spec, field.NewPath("spec"))...)
	case *appsv1.Deployment:
		errs := meta(&o.ObjectMeta, true, apivalidation.NameIsDNSSubdomain)
		return append(errs, validateDeployment(o)...)
	case *appsv1.DaemonSet:
		errs := meta(&o.ObjectMeta, true, apivalidation.NameIsDNSSubdomain)
		return append(errs, validateDaemonSet(o)...)
	case *appsv1.StatefulSet:
		errs := meta(&o.ObjectMeta, true, apivalidation.NameIsDNSLabel)
		errs = append(errs, validateSelector(o.Spec.Selector, &o.Spec.Template, field.NewPath("spec"))...)
		return append(errs, validatePodSpec(&o.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))...)
	case *corev1.Service:
		errs := meta(&o.ObjectMeta, true, apivalidation.NameIsDNS1035Label)
		return append(errs, validateService(o)...)
	case *corev1.ConfigMap:
		errs := meta(&o.ObjectMeta, true, apivalidation.NameIsDNSSubdomain)
		return append(errs, validateConfigMap(o)...)
	case *corev1.Secret:
		errs := meta(&o.ObjectMeta, true, apivalidation.NameIsDNSSubdomain)
		for k := range o.Data {
			errs = append(errs, keyErrs(k, field.NewPath("data").Key(k))...)
		}
		for k := range o.StringData {
			errs = append(errs, keyErrs(k, field.NewPath("stringData").Key(k))...)
		}
		return errs
	case *corev1.ServiceAccount:
		return meta(&o.ObjectMeta, true, apivalidation.NameIsDNSSubdomain)
	case *corev1.PersistentVolumeClaim:
		errs := meta(&o.ObjectMeta, true, apivalidation.NameIsDNSSubdomain)
		return append(errs, validatePVC(o)...)
	case *nodev1.RuntimeClass:
		errs := meta(&o.ObjectMeta, false, apivalidation.NameIsDNSSubdomain)
		for _, msg := range validation.IsDNS1123Label(o.Handler) {
			errs = append(errs, field.Invalid(field.NewPath("handler"), o.Handler, msg))
		}
		return errs
	default:
		// Decoded, so the schema held; only the metadata is checked.
		accessor, ok := d.obj.(metav1.Object)
		if !ok {
			return field.ErrorList{field.InternalError(nil, fmt.Errorf("%T has no object metadata", d.obj))}
		}
		var errs field.ErrorList
		for _, msg := range apivalidation.NameIsDNSSubdomain(accessor.GetName(), false) {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), accessor.GetName(), msg))
		}
		errs = append(errs, metavalidation.ValidateLabels(accessor.GetLabels(), field.NewPath("metadata", "labels"))...)
		return append(errs, apivalidation.ValidateAnnotations(accessor.GetAnnotations(), field.NewPath("metadata", "annotations"))...)
	}
}

// meta checks object metadata as the API server does on create. A
// namespaced object may leave its namespace out (helm fills it in at
// install); a cluster-scoped one must not set one.
func meta(m *metav1.ObjectMeta, namespaced bool, nameFn apivalidation.ValidateNameFunc) field.ErrorList {
	requires := namespaced
	if namespaced && m.Namespace == "" {
		cp := *m
		cp.Namespace = "default"
		m = &cp
	}
	return apivalidation.ValidateObjectMeta(m, requires, nameFn, field.NewPath("metadata"))
}

func keyErrs(k string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsConfigMapKey(k) {
		errs = append(errs, field.Invalid(p, k, msg))
	}
	return errs
}

func validateConfigMap(o *corev1.ConfigMap) field.ErrorList {
	var errs field.ErrorList
	for k := range o.Data {
		errs = append(errs, keyErrs(k, field.NewPath("data").Key(k))...)
	}
	for k := range o.BinaryData {
		errs = append(errs, keyErrs(k, field.NewPath("binaryData").Key(k))...)
		if _, dup := o.Data[k]; dup {
			errs = append(errs, field.Duplicate(field.NewPath("binaryData").Key(k), k))
		}
	}
	return errs
}

func validatePVC(o *corev1.PersistentVolumeClaim) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	if len(o.Spec.AccessModes) == 0 {
		errs = append(errs, field.Required(p.Child("accessModes"), "at least 1 access mode is required"))
	}
	for i, m := range o.Spec.AccessModes {
		switch m {
		case corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod:
		default:
			errs = append(errs, field.NotSupported(p.Child("accessModes").Index(i), m, []string(nil)))
		}
	}
	q, ok := o.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok || q.Sign() <= 0 {
		errs = append(errs, field.Required(p.Child("resources", "requests", "storage"), "a positive size is required"))
	}
	if sc := o.Spec.StorageClassName; sc != nil && *sc != "" {
		for _, msg := range validation.IsDNS1123Subdomain(*sc) {
			errs = append(errs, field.Invalid(p.Child("storageClassName"), *sc, msg))
		}
	}
	return errs
}

func validateSelector(sel *metav1.LabelSelector, tmpl *corev1.PodTemplateSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return append(errs, field.Required(p.Child("selector"), "a non-empty selector is required"))
	}
	errs = append(errs, metavalidation.ValidateLabelSelector(sel, metavalidation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	errs = append(errs, metavalidation.ValidateLabels(tmpl.Labels, p.Child("template", "metadata", "labels"))...)
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return append(errs, field.Invalid(p.Child("selector"), sel, err.Error()))
	}
	if !s.Matches(labels.Set(tmpl.Labels)) {
		errs = append(errs, field.Invalid(p.Child("template", "metadata", "labels"), tmpl.Labels, "`selector` does not match template `labels`"))
	}
	errs = append(errs, apivalidation.ValidateAnnotations(tmpl.Annotations, p.Child("template", "metadata", "annotations"))...)
	return errs
}

func validateDeployment(o *appsv1.Deployment) field.ErrorList {
	p := field.NewPath("spec")
	errs := validateSelector(o.Spec.Selector, &o.Spec.Template, p)
	if o.Spec.Replicas != nil && *o.Spec.Replicas < 0 {
		errs = append(errs, field.Invalid(p.Child("replicas"), *o.Spec.Replicas, "must be >= 0"))
	}
	switch o.Spec.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if o.Spec.Strategy.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(p.Child("strategy", "rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
		}
	case appsv1.RollingUpdateDeploymentStrategyType, "":
	default:
		errs = append(errs, field.NotSupported(p.Child("strategy", "type"), o.Spec.Strategy.Type, []string{"Recreate", "RollingUpdate"}))
	}
	if rp := o.Spec.Template.Spec.RestartPolicy; rp != "" && rp != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(p.Child("template", "spec", "restartPolicy"), rp, []string{"Always"}))
	}
	return append(errs, validatePodSpec(&o.Spec.Template.Spec, p.Child("template", "spec"))...)
}

func validateDaemonSet(o *appsv1.DaemonSet) field.ErrorList {
	p := field.NewPath("spec")
	errs := validateSelector(o.Spec.Selector, &o.Spec.Template, p)
	switch o.Spec.UpdateStrategy.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
		if o.Spec.UpdateStrategy.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(p.Child("updateStrategy", "rollingUpdate"), "may not be specified when `type` is 'OnDelete'"))
		}
	case appsv1.RollingUpdateDaemonSetStrategyType, "":
	default:
		errs = append(errs, field.NotSupported(p.Child("updateStrategy", "type"), o.Spec.UpdateStrategy.Type, []string{"OnDelete", "RollingUpdate"}))
	}
	if rp := o.Spec.Template.Spec.RestartPolicy; rp != "" && rp != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(p.Child("template", "spec", "restartPolicy"), rp, []string{"Always"}))
	}
	return append(errs, validatePodSpec(&o.Spec.Template.Spec, p.Child("template", "spec"))...)
}

func validateService(o *corev1.Service) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	switch o.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, "":
		if len(o.Spec.Ports) == 0 && o.Spec.ClusterIP != corev1.ClusterIPNone {
			errs = append(errs, field.Required(p.Child("ports"), ""))
		}
	case corev1.ServiceTypeExternalName:
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), o.Spec.Type, []string(nil)))
	}
	names := map[string]bool{}
	for i, port := range o.Spec.Ports {
		pp := p.Child("ports").Index(i)
		if len(o.Spec.Ports) > 1 && port.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), "required when more than one port"))
		}
		if port.Name != "" {
			for _, msg := range validation.IsDNS1123Label(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if names[port.Name] {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			names[port.Name] = true
		}
		for _, msg := range validation.IsValidPortNum(int(port.Port)) {
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, msg))
		}
		switch port.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP, "":
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string(nil)))
		}
		errs = append(errs, validateTargetPort(port.TargetPort, pp.Child("targetPort"))...)
	}
	errs = append(errs, metavalidation.ValidateLabels(o.Spec.Selector, p.Child("selector"))...)
	return errs
}

func validateTargetPort(t intstr.IntOrString, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Type == intstr.String {
		for _, msg := range validation.IsValidPortName(t.StrVal) {
			errs = append(errs, field.Invalid(p, t.StrVal, msg))
		}
	} else if t.IntVal != 0 {
		for _, msg := range validation.IsValidPortNum(int(t.IntVal)) {
			errs = append(errs, field.Invalid(p, t.IntVal, msg))
		}
	}
	return errs
}

// countSources counts the volume sources set in a VolumeSource (each is a
// pointer field).
func countSources(v *corev1.VolumeSource) int {
	n := 0
	rv := reflect.ValueOf(v).Elem()
	for i := 0; i < rv.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			n++
		}
	}
	return n
}

func validateMode(mode *int32, p *field.Path) field.ErrorList {
	if mode != nil && (*mode < 0 || *mode > 0o777) {
		return field.ErrorList{field.Invalid(p, *mode, "must be a number between 0 and 0777 (octal), both inclusive")}
	}
	return nil
}

func validateItems(items []corev1.KeyToPath, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		ip := p.Index(i)
		errs = append(errs, keyErrs(it.Key, ip.Child("key"))...)
		if it.Path == "" || path.IsAbs(it.Path) || strings.Contains(it.Path, "..") {
			errs = append(errs, field.Invalid(ip.Child("path"), it.Path, "must be a relative path without '..'"))
		}
		errs = append(errs, validateMode(it.Mode, ip.Child("mode"))...)
	}
	return errs
}

func validateVolumes(vols []corev1.Volume, p *field.Path) (map[string]*corev1.Volume, field.ErrorList) {
	var errs field.ErrorList
	byName := map[string]*corev1.Volume{}
	for i := range vols {
		v := &vols[i]
		vp := p.Index(i)
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			errs = append(errs, field.Invalid(vp.Child("name"), v.Name, msg))
		}
		if byName[v.Name] != nil {
			errs = append(errs, field.Duplicate(vp.Child("name"), v.Name))
		}
		byName[v.Name] = v
		if n := countSources(&v.VolumeSource); n != 1 {
			errs = append(errs, field.Invalid(vp, v.Name, fmt.Sprintf("must specify exactly 1 volume source, has %d", n)))
		}
		switch {
		case v.HostPath != nil:
			if !path.IsAbs(v.HostPath.Path) {
				errs = append(errs, field.Invalid(vp.Child("hostPath", "path"), v.HostPath.Path, "must be an absolute path"))
			}
			if t := v.HostPath.Type; t != nil {
				switch *t {
				case corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory, corev1.HostPathFileOrCreate,
					corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev:
				default:
					errs = append(errs, field.NotSupported(vp.Child("hostPath", "type"), *t, []string(nil)))
				}
			}
		case v.ConfigMap != nil:
			for _, msg := range validation.IsDNS1123Subdomain(v.ConfigMap.Name) {
				errs = append(errs, field.Invalid(vp.Child("configMap", "name"), v.ConfigMap.Name, msg))
			}
			errs = append(errs, validateMode(v.ConfigMap.DefaultMode, vp.Child("configMap", "defaultMode"))...)
			errs = append(errs, validateItems(v.ConfigMap.Items, vp.Child("configMap", "items"))...)
		case v.Secret != nil:
			for _, msg := range validation.IsDNS1123Subdomain(v.Secret.SecretName) {
				errs = append(errs, field.Invalid(vp.Child("secret", "secretName"), v.Secret.SecretName, msg))
			}
			errs = append(errs, validateMode(v.Secret.DefaultMode, vp.Child("secret", "defaultMode"))...)
			errs = append(errs, validateItems(v.Secret.Items, vp.Child("secret", "items"))...)
		case v.Projected != nil:
			errs = append(errs, validateMode(v.Projected.DefaultMode, vp.Child("projected", "defaultMode"))...)
			for j, s := range v.Projected.Sources {
				sp := vp.Child("projected", "sources").Index(j)
				n := 0
				if s.Secret != nil {
					n++
					for _, msg := range validation.IsDNS1123Subdomain(s.Secret.Name) {
						errs = append(errs, field.Invalid(sp.Child("secret", "name"), s.Secret.Name, msg))
					}
					errs = append(errs, validateItems(s.Secret.Items, sp.Child("secret", "items"))...)
				}
				if s.ConfigMap != nil {
					n++
					for _, msg := range validation.IsDNS1123Subdomain(s.ConfigMap.Name) {
						errs = append(errs, field.Invalid(sp.Child("configMap", "name"), s.ConfigMap.Name, msg))
					}
					errs = append(errs, validateItems(s.ConfigMap.Items, sp.Child("configMap", "items"))...)
				}
				if s.DownwardAPI != nil {
					n++
				}
				if s.ServiceAccountToken != nil {
					n++
				}
				if s.ClusterTrustBundle != nil {
					n++
				}
				if s.PodCertificate != nil {
					n++
				}
				if n != 1 {
					errs = append(errs, field.Invalid(sp, n, "must specify exactly 1 projection source"))
				}
			}
		case v.PersistentVolumeClaim != nil:
			for _, msg := range validation.IsDNS1123Subdomain(v.PersistentVolumeClaim.ClaimName) {
				errs = append(errs, field.Invalid(vp.Child("persistentVolumeClaim", "claimName"), v.PersistentVolumeClaim.ClaimName, msg))
			}
		}
	}
	return byName, errs
}

func validatePodSpec(spec *corev1.PodSpec, p *field.Path) field.ErrorList {
	vols, errs := validateVolumes(spec.Volumes, p.Child("volumes"))
	if len(spec.Containers) == 0 {
		errs = append(errs, field.Required(p.Child("containers"), ""))
	}
	names := map[string]bool{}
	check := func(c *corev1.Container, cp *field.Path) {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(cp.Child("name"), c.Name, msg))
		}
		if names[c.Name] {
			errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
		}
		names[c.Name] = true
		errs = append(errs, validateContainer(c, spec, vols, cp)...)
	}
	for i := range spec.InitContainers {
		check(&spec.InitContainers[i], p.Child("initContainers").Index(i))
	}
	for i := range spec.Containers {
		check(&spec.Containers[i], p.Child("containers").Index(i))
	}
	switch spec.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever, "":
	default:
		errs = append(errs, field.NotSupported(p.Child("restartPolicy"), spec.RestartPolicy, []string(nil)))
	}
	switch spec.DNSPolicy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone, "":
	default:
		errs = append(errs, field.NotSupported(p.Child("dnsPolicy"), spec.DNSPolicy, []string(nil)))
	}
	errs = append(errs, metavalidation.ValidateLabels(spec.NodeSelector, p.Child("nodeSelector"))...)
	if spec.PriorityClassName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(spec.PriorityClassName) {
			errs = append(errs, field.Invalid(p.Child("priorityClassName"), spec.PriorityClassName, msg))
		}
	}
	if spec.ServiceAccountName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(spec.ServiceAccountName) {
			errs = append(errs, field.Invalid(p.Child("serviceAccountName"), spec.ServiceAccountName, msg))
		}
	}
	if spec.RuntimeClassName != nil {
		for _, msg := range validation.IsDNS1123Subdomain(*spec.RuntimeClassName) {
			errs = append(errs, field.Invalid(p.Child("runtimeClassName"), *spec.RuntimeClassName, msg))
		}
	}
	if g := spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *g, "must be >= 0"))
	}
	for i, t := range spec.Tolerations {
		tp := p.Child("tolerations").Index(i)
		if t.Key != "" {
			errs = append(errs, metavalidation.ValidateLabelName(t.Key, tp.Child("key"))...)
		}
		switch t.Operator {
		case corev1.TolerationOpExists:
			if t.Value != "" {
				errs = append(errs, field.Invalid(tp.Child("value"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		case corev1.TolerationOpEqual, "":
			if t.Key == "" {
				errs = append(errs, field.Invalid(tp.Child("operator"), t.Operator, "operator must be Exists when `key` is empty"))
			}
		case corev1.TolerationOpLt, corev1.TolerationOpGt:
		default:
			errs = append(errs, field.NotSupported(tp.Child("operator"), t.Operator, []string(nil)))
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute, "":
		default:
			errs = append(errs, field.NotSupported(tp.Child("effect"), t.Effect, []string(nil)))
		}
	}
	if sc := spec.SecurityContext; sc != nil {
		if sc.RunAsNonRoot != nil && *sc.RunAsNonRoot && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			errs = append(errs, field.Invalid(p.Child("securityContext", "runAsNonRoot"), true, "runAsUser 0 contradicts runAsNonRoot"))
		}
	}
	// Host ports on the host network are the container ports.
	if spec.HostNetwork {
		for i, c := range spec.Containers {
			for j, port := range c.Ports {
				if port.HostPort != 0 && port.HostPort != port.ContainerPort {
					errs = append(errs, field.Invalid(p.Child("containers").Index(i).Child("ports").Index(j).Child("hostPort"), port.HostPort, "must match `containerPort` when `hostNetwork` is true"))
				}
			}
		}
	}
	return errs
}

func validateContainer(c *corev1.Container, spec *corev1.PodSpec, vols map[string]*corev1.Volume, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.Image == "" {
		errs = append(errs, field.Required(p.Child("image"), ""))
	}
	switch c.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever, "":
	default:
		errs = append(errs, field.NotSupported(p.Child("imagePullPolicy"), c.ImagePullPolicy, []string(nil)))
	}
	portNames := map[string]bool{}
	portNums := map[int32]bool{}
	for i, port := range c.Ports {
		pp := p.Child("ports").Index(i)
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if portNames[port.Name] {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			portNames[port.Name] = true
		}
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
		}
		portNums[port.ContainerPort] = true
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				errs = append(errs, field.Invalid(pp.Child("hostPort"), port.HostPort, msg))
			}
		}
	}
	for i, e := range c.Env {
		ep := p.Child("env").Index(i)
		for _, msg := range validation.IsEnvVarName(e.Name) {
			errs = append(errs, field.Invalid(ep.Child("name"), e.Name, msg))
		}
		if e.Value != "" && e.ValueFrom != nil {
			errs = append(errs, field.Invalid(ep.Child("valueFrom"), "", "may not be specified when `value` is not empty"))
		}
	}
	privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
	mountPaths := map[string]bool{}
	for i, m := range c.VolumeMounts {
		mp := p.Child("volumeMounts").Index(i)
		if vols[m.Name] == nil {
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if !path.IsAbs(m.MountPath) {
			errs = append(errs, field.Invalid(mp.Child("mountPath"), m.MountPath, "must be an absolute path"))
		}
		if mountPaths[m.MountPath] {
			errs = append(errs, field.Invalid(mp.Child("mountPath"), m.MountPath, "must be unique"))
		}
		mountPaths[m.MountPath] = true
		if strings.HasPrefix(m.SubPath, "/") || strings.Contains(m.SubPath, "..") {
			errs = append(errs, field.Invalid(mp.Child("subPath"), m.SubPath, "must be a relative path without '..'"))
		}
		if m.MountPropagation != nil {
			switch *m.MountPropagation {
			case corev1.MountPropagationBidirectional:
				if !privileged {
					errs = append(errs, field.Forbidden(mp.Child("mountPropagation"), "Bidirectional mount propagation is available only to privileged containers"))
				}
				if m.ReadOnly {
					errs = append(errs, field.Forbidden(mp.Child("mountPropagation"), "Bidirectional mount propagation is not allowed on a read-only mount"))
				}
			case corev1.MountPropagationHostToContainer, corev1.MountPropagationNone:
			default:
				errs = append(errs, field.NotSupported(mp.Child("mountPropagation"), *m.MountPropagation, []string(nil)))
			}
		}
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if pr.probe == nil {
			continue
		}
		pp := p.Child(pr.name)
		h := pr.probe.ProbeHandler
		n := 0
		if h.Exec != nil {
			n++
		}
		if h.HTTPGet != nil {
			n++
			g := h.HTTPGet
			if g.Path != "" && !strings.HasPrefix(g.Path, "/") {
				errs = append(errs, field.Invalid(pp.Child("httpGet", "path"), g.Path, "must start with /"))
			}
			switch g.Scheme {
			case corev1.URISchemeHTTP, corev1.URISchemeHTTPS, "":
			default:
				errs = append(errs, field.NotSupported(pp.Child("httpGet", "scheme"), g.Scheme, []string(nil)))
			}
			errs = append(errs, probePort(g.Port, portNames, pp.Child("httpGet", "port"))...)
		}
		if h.TCPSocket != nil {
			n++
			errs = append(errs, probePort(h.TCPSocket.Port, portNames, pp.Child("tcpSocket", "port"))...)
		}
		if h.GRPC != nil {
			n++
		}
		if n != 1 {
			errs = append(errs, field.Invalid(pp, n, "must specify exactly 1 handler type"))
		}
		if pr.name != "readinessProbe" && pr.probe.SuccessThreshold > 1 {
			errs = append(errs, field.Invalid(pp.Child("successThreshold"), pr.probe.SuccessThreshold, "must be 1"))
		}
		for _, v := range []struct {
			n string
			v int32
		}{{"initialDelaySeconds", pr.probe.InitialDelaySeconds}, {"timeoutSeconds", pr.probe.TimeoutSeconds}, {"periodSeconds", pr.probe.PeriodSeconds}, {"failureThreshold", pr.probe.FailureThreshold}} {
			if v.v < 0 {
				errs = append(errs, field.Invalid(pp.Child(v.n), v.v, "must be >= 0"))
			}
		}
	}
	for name, q := range c.Resources.Limits {
		if r, ok := c.Resources.Requests[name]; ok && r.Cmp(q) > 0 {
			errs = append(errs, field.Invalid(p.Child("resources", "requests").Key(string(name)), r.String(), "must be less than or equal to "+string(name)+" limit of "+q.String()))
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if privileged && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			errs = append(errs, field.Invalid(p.Child("securityContext"), "", "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
		}
		if sc.Capabilities != nil {
			for _, cap := range sc.Capabilities.Add {
				if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation && cap == "CAP_SYS_ADMIN" {
					errs = append(errs, field.Invalid(p.Child("securityContext"), "", "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"))
				}
			}
		}
		if sc.RunAsNonRoot != nil && *sc.RunAsNonRoot && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			errs = append(errs, field.Invalid(p.Child("securityContext", "runAsNonRoot"), true, "runAsUser 0 contradicts runAsNonRoot"))
		}
		if sp := sc.SeccompProfile; sp != nil {
			switch sp.Type {
			case corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined:
			case corev1.SeccompProfileTypeLocalhost:
				if sp.LocalhostProfile == nil {
					errs = append(errs, field.Required(p.Child("securityContext", "seccompProfile", "localhostProfile"), ""))
				}
			default:
				errs = append(errs, field.NotSupported(p.Child("securityContext", "seccompProfile", "type"), sp.Type, []string(nil)))
			}
		}
	}
	_ = spec
	return errs
}

func probePort(port intstr.IntOrString, names map[string]bool, p *field.Path) field.ErrorList {
	if port.Type == intstr.String {
		if !names[port.StrVal] {
			return field.ErrorList{field.NotFound(p, port.StrVal)}
		}
		return nil
	}
	var errs field.ErrorList
	for _, msg := range validation.IsValidPortNum(int(port.IntVal)) {
		errs = append(errs, field.Invalid(p, port.IntVal, msg))
	}
	return errs
}

func validateServiceMonitor(m map[string]any) field.ErrorList {
	var errs field.ErrorList
	md, _ := m["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), name, msg))
	}
	if l, ok := md["labels"].(map[string]any); ok {
		errs = append(errs, metavalidation.ValidateLabels(stringMap(l), field.NewPath("metadata", "labels"))...)
	}
	spec, ok := m["spec"].(map[string]any)
	if !ok {
		return append(errs, field.Required(field.NewPath("spec"), ""))
	}
	if eps, ok := spec["endpoints"].([]any); !ok || len(eps) == 0 {
		errs = append(errs, field.Required(field.NewPath("spec", "endpoints"), ""))
	}
	if _, ok := spec["selector"].(map[string]any); !ok {
		errs = append(errs, field.Required(field.NewPath("spec", "selector"), ""))
	}
	return errs
}

func stringMap(m map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// crossChecks relates documents of the stream to each other.
func crossChecks(docs []*doc) []string {
	var failures []string
	configMaps := map[string]bool{}
	var templates []*corev1.PodTemplateSpec
	services := map[string]*corev1.Service{}
	for _, d := range docs {
		switch o := d.obj.(type) {
		case *corev1.ConfigMap:
			configMaps[o.Name] = true
		case *appsv1.Deployment:
			templates = append(templates, &o.Spec.Template)
		case *appsv1.DaemonSet:
			templates = append(templates, &o.Spec.Template)
		case *appsv1.StatefulSet:
			templates = append(templates, &o.Spec.Template)
		case *corev1.Service:
			services[o.Name] = o
		}
	}
	for _, d := range docs {
		var spec *corev1.PodSpec
		switch o := d.obj.(type) {
		case *appsv1.Deployment:
			spec = &o.Spec.Template.Spec
		case *appsv1.DaemonSet:
			spec = &o.Spec.Template.Spec
		case *appsv1.StatefulSet:
			spec = &o.Spec.Template.Spec
		case *corev1.Pod:
			// A static pod has no API server to resolve objects with.
			for _, v := range o.Spec.Volumes {
				if v.ConfigMap != nil || v.Secret != nil || v.PersistentVolumeClaim != nil || v.Projected != nil {
					failures = append(failures, fmt.Sprintf("%s: volume %q needs the API server (a bare Pod here is meant as a static pod)", d, v.Name))
				}
			}
		case *corev1.Service:
			if len(o.Spec.Selector) == 0 {
				continue
			}
			sel := labels.SelectorFromSet(o.Spec.Selector)
			found := false
			for _, t := range templates {
				if sel.Matches(labels.Set(t.Labels)) {
					found = true
					for _, port := range o.Spec.Ports {
						if port.TargetPort.Type == intstr.String && !hasPortName(&t.Spec, port.TargetPort.StrVal) {
							failures = append(failures, fmt.Sprintf("%s: targetPort %q names no container port of the pods it selects", d, port.TargetPort.StrVal))
						}
					}
				}
			}
			if !found {
				failures = append(failures, fmt.Sprintf("%s: selector %v selects no workload's pods in this stream", d, o.Spec.Selector))
			}
		}
		if spec != nil {
			for _, v := range spec.Volumes {
				if v.ConfigMap != nil && !configMaps[v.ConfigMap.Name] && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional) {
					failures = append(failures, fmt.Sprintf("%s: volume %q names ConfigMap %q, not in this stream", d, v.Name, v.ConfigMap.Name))
				}
			}
		}
		if d.raw != nil {
			failures = append(failures, checkServiceMonitorTarget(d, services)...)
		}
	}
	sort.Strings(failures)
	return failures
}

func hasPortName(spec *corev1.PodSpec, name string) bool {
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

// checkServiceMonitorTarget: the monitor's matchLabels select a Service of
// the stream and each endpoint's port is one of that Service's port names.
func checkServiceMonitorTarget(d *doc, services map[string]*corev1.Service) []string {
	spec, _ := d.raw["spec"].(map[string]any)
	sel, _ := spec["selector"].(map[string]any)
	ml, _ := sel["matchLabels"].(map[string]any)
	if len(ml) == 0 {
		return nil
	}
	s := labels.SelectorFromSet(stringMap(ml))
	var failures []string
	matched := false
	for _, svc := range services {
		if !s.Matches(labels.Set(svc.Labels)) {
			continue
		}
		matched = true
		eps, _ := spec["endpoints"].([]any)
		for i, e := range eps {
			em, _ := e.(map[string]any)
			port, _ := em["port"].(string)
			if port == "" {
				continue
			}
			ok := false
			for _, p := range svc.Spec.Ports {
				ok = ok || p.Name == port
			}
			if !ok {
				failures = append(failures, fmt.Sprintf("%s: spec.endpoints[%d].port %q is no port name of Service %s", d, i, port, svc.Name))
			}
		}
	}
	if !matched {
		failures = append(failures, fmt.Sprintf("%s: spec.selector.matchLabels %v selects no Service in this stream", d, ml))
	}
	return failures
}
