package k8s_test

// The subset of the Kubernetes API the manifests use, decoded strictly
// (unknown fields are errors), so a misspelt or misplaced field fails the
// tests instead of being dropped silently by the API server. A real field
// that a manifest starts to use goes here too.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type labelSelector struct {
	MatchLabels      map[string]string `json:"matchLabels,omitempty"`
	MatchExpressions []struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values,omitempty"`
	} `json:"matchExpressions,omitempty"`
}

// matches reports whether the selector selects a pod with these labels.
func (s *labelSelector) matches(labels map[string]string) bool {
	if s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0) {
		return false // an empty selector is never what we mean
	}
	for k, v := range s.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	for _, e := range s.MatchExpressions {
		v, ok := labels[e.Key]
		in := false
		for _, want := range e.Values {
			in = in || v == want
		}
		switch e.Operator {
		case "In":
			if !ok || !in {
				return false
			}
		case "NotIn":
			if ok && in {
				return false
			}
		case "Exists":
			if !ok {
				return false
			}
		case "DoesNotExist":
			if ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// quantity is a resource.Quantity: a string ("1Gi", "500m") or a number.
type quantity string

func (q *quantity) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*q = quantity(s)
		return nil
	}
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&n); err != nil {
		return fmt.Errorf("quantity: %s is neither a string nor a number", b)
	}
	*q = quantity(n.String())
	return nil
}

// value parses a Kubernetes quantity exactly.
func (q quantity) value() (*big.Rat, error) {
	s := strings.TrimSpace(string(q))
	suffixes := []struct {
		s string
		f *big.Rat
	}{
		{"Ki", pow(2, 10)}, {"Mi", pow(2, 20)}, {"Gi", pow(2, 30)}, {"Ti", pow(2, 40)}, {"Pi", pow(2, 50)}, {"Ei", pow(2, 60)},
		{"n", new(big.Rat).SetFrac64(1, 1e9)}, {"u", new(big.Rat).SetFrac64(1, 1e6)}, {"m", new(big.Rat).SetFrac64(1, 1e3)},
		{"k", pow(10, 3)}, {"M", pow(10, 6)}, {"G", pow(10, 9)}, {"T", pow(10, 12)}, {"P", pow(10, 15)}, {"E", pow(10, 18)},
	}
	f := big.NewRat(1, 1)
	for _, x := range suffixes {
		if strings.HasSuffix(s, x.s) {
			s, f = strings.TrimSuffix(s, x.s), x.f
			break
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok || s == "" || r.Sign() < 0 {
		return nil, fmt.Errorf("invalid quantity %q", string(q))
	}
	return r.Mul(r, f), nil
}

func pow(base, exp int64) *big.Rat {
	return new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(base), big.NewInt(exp), nil))
}

// intOrString is an intstr.IntOrString: a port number or a port name, a
// count or a percentage.
type intOrString struct {
	isInt bool
	i     int64
	s     string
}

func (v *intOrString) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &v.s); err == nil {
		return nil
	}
	v.isInt = true
	return json.Unmarshal(b, &v.i)
}

func (v intOrString) String() string {
	if v.isInt {
		return strconv.FormatInt(v.i, 10)
	}
	return v.s
}

// --- workloads -----------------------------------------------------------

type deployment struct {
	typeMeta
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Replicas                *int32          `json:"replicas,omitempty"`
		Selector                *labelSelector  `json:"selector"`
		Template                podTemplateSpec `json:"template"`
		RevisionHistoryLimit    *int32          `json:"revisionHistoryLimit,omitempty"`
		MinReadySeconds         int32           `json:"minReadySeconds,omitempty"`
		ProgressDeadlineSeconds *int32          `json:"progressDeadlineSeconds,omitempty"`
		Strategy                struct {
			Type          string `json:"type,omitempty"`
			RollingUpdate *struct {
				MaxUnavailable *intOrString `json:"maxUnavailable,omitempty"`
				MaxSurge       *intOrString `json:"maxSurge,omitempty"`
			} `json:"rollingUpdate,omitempty"`
		} `json:"strategy"`
	} `json:"spec"`
}

type statefulSet struct {
	typeMeta
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Replicas             *int32            `json:"replicas,omitempty"`
		Selector             *labelSelector    `json:"selector"`
		Template             podTemplateSpec   `json:"template"`
		ServiceName          string            `json:"serviceName"`
		PodManagementPolicy  string            `json:"podManagementPolicy,omitempty"`
		RevisionHistoryLimit *int32            `json:"revisionHistoryLimit,omitempty"`
		MinReadySeconds      int32             `json:"minReadySeconds,omitempty"`
		VolumeClaimTemplates []json.RawMessage `json:"volumeClaimTemplates,omitempty"`
		UpdateStrategy       struct {
			Type          string `json:"type,omitempty"`
			RollingUpdate *struct {
				Partition      *int32       `json:"partition,omitempty"`
				MaxUnavailable *intOrString `json:"maxUnavailable,omitempty"`
			} `json:"rollingUpdate,omitempty"`
		} `json:"updateStrategy"`
		PersistentVolumeClaimRetentionPolicy *struct {
			WhenDeleted string `json:"whenDeleted,omitempty"`
			WhenScaled  string `json:"whenScaled,omitempty"`
		} `json:"persistentVolumeClaimRetentionPolicy,omitempty"`
	} `json:"spec"`
}

type podTemplateSpec struct {
	Metadata objectMeta `json:"metadata"`
	Spec     podSpec    `json:"spec"`
}

type podSpec struct {
	ServiceAccountName            string              `json:"serviceAccountName,omitempty"`
	AutomountServiceAccountToken  *bool               `json:"automountServiceAccountToken,omitempty"`
	TerminationGracePeriodSeconds *int64              `json:"terminationGracePeriodSeconds,omitempty"`
	EnableServiceLinks            *bool               `json:"enableServiceLinks,omitempty"`
	SecurityContext               *podSecurityContext `json:"securityContext,omitempty"`
	TopologySpreadConstraints     []struct {
		MaxSkew            int32          `json:"maxSkew"`
		TopologyKey        string         `json:"topologyKey"`
		WhenUnsatisfiable  string         `json:"whenUnsatisfiable"`
		LabelSelector      *labelSelector `json:"labelSelector,omitempty"`
		MatchLabelKeys     []string       `json:"matchLabelKeys,omitempty"`
		MinDomains         *int32         `json:"minDomains,omitempty"`
		NodeAffinityPolicy string         `json:"nodeAffinityPolicy,omitempty"`
		NodeTaintsPolicy   string         `json:"nodeTaintsPolicy,omitempty"`
	} `json:"topologySpreadConstraints,omitempty"`
	Affinity *struct {
		NodeAffinity    json.RawMessage  `json:"nodeAffinity,omitempty"`
		PodAffinity     json.RawMessage  `json:"podAffinity,omitempty"`
		PodAntiAffinity *podAntiAffinity `json:"podAntiAffinity,omitempty"`
	} `json:"affinity,omitempty"`
	NodeSelector      map[string]string `json:"nodeSelector,omitempty"`
	Tolerations       []json.RawMessage `json:"tolerations,omitempty"`
	PriorityClassName string            `json:"priorityClassName,omitempty"`
	ImagePullSecrets  []struct {
		Name string `json:"name"`
	} `json:"imagePullSecrets,omitempty"`
	InitContainers []container `json:"initContainers,omitempty"`
	Containers     []container `json:"containers"`
	Volumes        []volume    `json:"volumes,omitempty"`
}

type podAffinityTerm struct {
	LabelSelector     *labelSelector  `json:"labelSelector,omitempty"`
	TopologyKey       string          `json:"topologyKey"`
	Namespaces        []string        `json:"namespaces,omitempty"`
	NamespaceSelector json.RawMessage `json:"namespaceSelector,omitempty"`
	MatchLabelKeys    []string        `json:"matchLabelKeys,omitempty"`
	MismatchLabelKeys []string        `json:"mismatchLabelKeys,omitempty"`
}

type podAntiAffinity struct {
	Required  []podAffinityTerm `json:"requiredDuringSchedulingIgnoredDuringExecution,omitempty"`
	Preferred []struct {
		Weight          int32           `json:"weight"`
		PodAffinityTerm podAffinityTerm `json:"podAffinityTerm"`
	} `json:"preferredDuringSchedulingIgnoredDuringExecution,omitempty"`
}

type seccompProfile struct {
	Type             string `json:"type"`
	LocalhostProfile string `json:"localhostProfile,omitempty"`
}

type podSecurityContext struct {
	RunAsNonRoot        *bool           `json:"runAsNonRoot,omitempty"`
	RunAsUser           *int64          `json:"runAsUser,omitempty"`
	RunAsGroup          *int64          `json:"runAsGroup,omitempty"`
	FSGroup             *int64          `json:"fsGroup,omitempty"`
	FSGroupChangePolicy string          `json:"fsGroupChangePolicy,omitempty"`
	SupplementalGroups  []int64         `json:"supplementalGroups,omitempty"`
	SeccompProfile      *seccompProfile `json:"seccompProfile,omitempty"`
}

type securityContext struct {
	RunAsNonRoot             *bool  `json:"runAsNonRoot,omitempty"`
	RunAsUser                *int64 `json:"runAsUser,omitempty"`
	RunAsGroup               *int64 `json:"runAsGroup,omitempty"`
	Privileged               *bool  `json:"privileged,omitempty"`
	AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation,omitempty"`
	ReadOnlyRootFilesystem   *bool  `json:"readOnlyRootFilesystem,omitempty"`
	Capabilities             *struct {
		Add  []string `json:"add,omitempty"`
		Drop []string `json:"drop,omitempty"`
	} `json:"capabilities,omitempty"`
	SeccompProfile *seccompProfile `json:"seccompProfile,omitempty"`
}

type container struct {
	Name            string   `json:"name"`
	Image           string   `json:"image"`
	ImagePullPolicy string   `json:"imagePullPolicy,omitempty"`
	Command         []string `json:"command,omitempty"`
	Args            []string `json:"args,omitempty"`
	WorkingDir      string   `json:"workingDir,omitempty"`
	Ports           []struct {
		Name          string `json:"name,omitempty"`
		ContainerPort int32  `json:"containerPort"`
		Protocol      string `json:"protocol,omitempty"`
	} `json:"ports,omitempty"`
	EnvFrom []struct {
		Prefix       string `json:"prefix,omitempty"`
		ConfigMapRef *struct {
			Name     string `json:"name"`
			Optional *bool  `json:"optional,omitempty"`
		} `json:"configMapRef,omitempty"`
		SecretRef *struct {
			Name     string `json:"name"`
			Optional *bool  `json:"optional,omitempty"`
		} `json:"secretRef,omitempty"`
	} `json:"envFrom,omitempty"`
	Env []struct {
		Name      string `json:"name"`
		Value     string `json:"value,omitempty"`
		ValueFrom *struct {
			FieldRef *struct {
				APIVersion string `json:"apiVersion,omitempty"`
				FieldPath  string `json:"fieldPath"`
			} `json:"fieldRef,omitempty"`
			ResourceFieldRef *struct {
				ContainerName string   `json:"containerName,omitempty"`
				Resource      string   `json:"resource"`
				Divisor       quantity `json:"divisor,omitempty"`
			} `json:"resourceFieldRef,omitempty"`
			ConfigMapKeyRef *keyRef `json:"configMapKeyRef,omitempty"`
			SecretKeyRef    *keyRef `json:"secretKeyRef,omitempty"`
		} `json:"valueFrom,omitempty"`
	} `json:"env,omitempty"`
	Resources struct {
		Requests map[string]quantity `json:"requests,omitempty"`
		Limits   map[string]quantity `json:"limits,omitempty"`
	} `json:"resources"`
	StartupProbe   *probe `json:"startupProbe,omitempty"`
	LivenessProbe  *probe `json:"livenessProbe,omitempty"`
	ReadinessProbe *probe `json:"readinessProbe,omitempty"`
	Lifecycle      *struct {
		PreStop   *lifecycleHandler `json:"preStop,omitempty"`
		PostStart *lifecycleHandler `json:"postStart,omitempty"`
	} `json:"lifecycle,omitempty"`
	SecurityContext *securityContext `json:"securityContext,omitempty"`
	VolumeMounts    []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly,omitempty"`
		SubPath   string `json:"subPath,omitempty"`
	} `json:"volumeMounts,omitempty"`
	TerminationMessagePolicy string `json:"terminationMessagePolicy,omitempty"`
}

type keyRef struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Optional *bool  `json:"optional,omitempty"`
}

type httpGetAction struct {
	Path        string            `json:"path,omitempty"`
	Port        intOrString       `json:"port"`
	Scheme      string            `json:"scheme,omitempty"`
	HTTPHeaders []json.RawMessage `json:"httpHeaders,omitempty"`
}

type probe struct {
	HTTPGet   *httpGetAction `json:"httpGet,omitempty"`
	TCPSocket *struct {
		Port intOrString `json:"port"`
	} `json:"tcpSocket,omitempty"`
	Exec *struct {
		Command []string `json:"command"`
	} `json:"exec,omitempty"`
	GRPC *struct {
		Port    int32  `json:"port"`
		Service string `json:"service,omitempty"`
	} `json:"grpc,omitempty"`
	InitialDelaySeconds           int32  `json:"initialDelaySeconds,omitempty"`
	PeriodSeconds                 int32  `json:"periodSeconds,omitempty"`
	TimeoutSeconds                int32  `json:"timeoutSeconds,omitempty"`
	SuccessThreshold              int32  `json:"successThreshold,omitempty"`
	FailureThreshold              int32  `json:"failureThreshold,omitempty"`
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

type lifecycleHandler struct {
	Exec *struct {
		Command []string `json:"command"`
	} `json:"exec,omitempty"`
	HTTPGet *httpGetAction `json:"httpGet,omitempty"`
	Sleep   *struct {
		Seconds int64 `json:"seconds"`
	} `json:"sleep,omitempty"`
}

type keyToPath struct {
	Key  string `json:"key"`
	Path string `json:"path"`
	Mode *int32 `json:"mode,omitempty"`
}

type volume struct {
	Name     string `json:"name"`
	EmptyDir *struct {
		Medium    string   `json:"medium,omitempty"`
		SizeLimit quantity `json:"sizeLimit,omitempty"`
	} `json:"emptyDir,omitempty"`
	Secret *struct {
		SecretName  string      `json:"secretName"`
		DefaultMode *int32      `json:"defaultMode,omitempty"`
		Items       []keyToPath `json:"items,omitempty"`
		Optional    *bool       `json:"optional,omitempty"`
	} `json:"secret,omitempty"`
	ConfigMap *struct {
		Name        string      `json:"name"`
		DefaultMode *int32      `json:"defaultMode,omitempty"`
		Items       []keyToPath `json:"items,omitempty"`
		Optional    *bool       `json:"optional,omitempty"`
	} `json:"configMap,omitempty"`
	Projected json.RawMessage `json:"projected,omitempty"`
}

// --- everything else -----------------------------------------------------

type namespace struct {
	typeMeta
	Metadata objectMeta `json:"metadata"`
}

type serviceAccount struct {
	typeMeta
	Metadata                     objectMeta `json:"metadata"`
	AutomountServiceAccountToken *bool      `json:"automountServiceAccountToken,omitempty"`
	ImagePullSecrets             []struct {
		Name string `json:"name"`
	} `json:"imagePullSecrets,omitempty"`
}

type configMap struct {
	typeMeta
	Metadata   objectMeta        `json:"metadata"`
	Data       map[string]string `json:"data,omitempty"`
	BinaryData map[string]string `json:"binaryData,omitempty"`
	Immutable  *bool             `json:"immutable,omitempty"`
}

type service struct {
	typeMeta
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Type                     string            `json:"type,omitempty"`
		ClusterIP                string            `json:"clusterIP,omitempty"`
		Selector                 map[string]string `json:"selector,omitempty"`
		PublishNotReadyAddresses bool              `json:"publishNotReadyAddresses,omitempty"`
		SessionAffinity          string            `json:"sessionAffinity,omitempty"`
		InternalTrafficPolicy    string            `json:"internalTrafficPolicy,omitempty"`
		TrafficDistribution      string            `json:"trafficDistribution,omitempty"`
		Ports                    []struct {
			Name        string      `json:"name,omitempty"`
			Port        int32       `json:"port"`
			TargetPort  intOrString `json:"targetPort"`
			Protocol    string      `json:"protocol,omitempty"`
			AppProtocol string      `json:"appProtocol,omitempty"`
		} `json:"ports"`
	} `json:"spec"`
}

type podDisruptionBudget struct {
	typeMeta
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		MinAvailable               *intOrString   `json:"minAvailable,omitempty"`
		MaxUnavailable             *intOrString   `json:"maxUnavailable,omitempty"`
		Selector                   *labelSelector `json:"selector"`
		UnhealthyPodEvictionPolicy string         `json:"unhealthyPodEvictionPolicy,omitempty"`
	} `json:"spec"`
}

type horizontalPodAutoscaler struct {
	typeMeta
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicas *int32 `json:"minReplicas,omitempty"`
		MaxReplicas int32  `json:"maxReplicas"`
		Metrics     []struct {
			Type     string `json:"type"`
			Resource *struct {
				Name   string `json:"name"`
				Target struct {
					Type               string   `json:"type"`
					AverageUtilization *int32   `json:"averageUtilization,omitempty"`
					AverageValue       quantity `json:"averageValue,omitempty"`
					Value              quantity `json:"value,omitempty"`
				} `json:"target"`
			} `json:"resource,omitempty"`
		} `json:"metrics,omitempty"`
		Behavior json.RawMessage `json:"behavior,omitempty"`
	} `json:"spec"`
}

// kinds maps apiVersion/kind to a constructor of its strict schema: the only
// kinds the manifests may contain.
var kinds = map[string]func() any{
	"v1/Namespace":                           func() any { return new(namespace) },
	"v1/ServiceAccount":                      func() any { return new(serviceAccount) },
	"v1/ConfigMap":                           func() any { return new(configMap) },
	"v1/Service":                             func() any { return new(service) },
	"apps/v1/Deployment":                     func() any { return new(deployment) },
	"apps/v1/StatefulSet":                    func() any { return new(statefulSet) },
	"policy/v1/PodDisruptionBudget":          func() any { return new(podDisruptionBudget) },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return new(horizontalPodAutoscaler) },
}
