package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission/gateway"
)

type mount struct {
	MountPath string `yaml:"mountPath"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Selector map[string]any `yaml:"selector"`
		Ports    []struct {
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				Containers                    []struct {
					Args  []string `yaml:"args"`
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					ReadinessProbe probe `yaml:"readinessProbe"`
					LivenessProbe  probe `yaml:"livenessProbe"`
					Resources      struct {
						Requests map[string]string `yaml:"requests"`
						Limits   map[string]string `yaml:"limits"`
					} `yaml:"resources"`
					VolumeMounts []mount `yaml:"volumeMounts"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// TestKubernetesManifests: the manifests are ones serve really satisfies:
// the config in the ConfigMap loads, the probes name the admin port and
// paths serve answers, the Service targets the port serve listens on, the
// grace period covers --shutdown-delay plus --drain, and the flags exist.
func TestKubernetesManifests(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("kubernetes", "fairgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]k8sObject{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		objs[o.Kind] = o
	}
	cm, dep, svc := objs["ConfigMap"], objs["Deployment"], objs["Service"]
	// The admin token is the Secret's file, mounted in the pod: here, a
	// file of the test's in its place.
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("a-test-token-of-32-characters-ok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const mounted = "/etc/fairgate-admin/token"
	if !strings.Contains(cm.Data["fairgate.yaml"], mounted) {
		t.Fatalf("the ConfigMap's config does not read the admin token from %s", mounted)
	}
	cfg, err := gateway.Parse([]byte(strings.ReplaceAll(cm.Data["fairgate.yaml"], mounted, token)))
	if err != nil {
		t.Fatalf("the ConfigMap's config: %v", err)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	port := func(addr string) int {
		_, p, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		return n
	}
	if ports["http"] != port(cfg.Listen) || ports["admin"] != port(cfg.AdminListen) {
		t.Errorf("container ports %v; the config listens on %s and %s", ports, cfg.Listen, cfg.AdminListen)
	}
	if !strings.HasPrefix(cfg.Listen, "0.0.0.0:") || !strings.HasPrefix(cfg.AdminListen, "0.0.0.0:") {
		t.Errorf("a pod must listen beyond loopback: %s, %s", cfg.Listen, cfg.AdminListen)
	}
	if svc.Spec.Ports[0].TargetPort != "http" || svc.Spec.Selector["app.kubernetes.io/name"] != dep.Spec.Template.Metadata.Labels["app.kubernetes.io/name"] {
		t.Errorf("the Service does not select the pods' http port: %+v", svc.Spec)
	}

	// The flags: serve accepts them, and the grace period covers them.
	if len(c.Args) < 3 || c.Args[0] != "serve" || c.Args[1] != "--config" ||
		!slices.ContainsFunc(c.VolumeMounts, func(m mount) bool { return strings.HasPrefix(c.Args[2], m.MountPath+"/") }) {
		t.Fatalf("args %v: want serve --config FILE on the mounted ConfigMap", c.Args)
	}
	flags := map[string]time.Duration{}
	for i := 3; i+1 < len(c.Args); i += 2 {
		d, err := time.ParseDuration(c.Args[i+1])
		if err != nil {
			t.Fatalf("%s %s: %v", c.Args[i], c.Args[i+1], err)
		}
		flags[c.Args[i]] = d
	}
	delay, drain := flags["--shutdown-delay"], flags["--drain"]
	if delay == 0 || drain == 0 {
		t.Errorf("args %v: want --shutdown-delay and --drain", c.Args)
	}
	if grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; grace <= delay+drain {
		t.Errorf("terminationGracePeriodSeconds %v does not cover shutdown-delay %v + drain %v", grace, delay, drain)
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}

	// The probes ask the admin port for paths serve answers.
	if c.ReadinessProbe.HTTPGet.Port != "admin" || c.LivenessProbe.HTTPGet.Port != "admin" {
		t.Errorf("probes on %q and %q, want the admin port", c.ReadinessProbe.HTTPGet.Port, c.LivenessProbe.HTTPGet.Port)
	}
	cfg.Upstream = "http://127.0.0.1:1"
	cfg.Redis = nil // the probes' answers do not depend on it
	srv, err := gateway.New(cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, path := range []string{c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path} {
		w := httptest.NewRecorder()
		srv.AdminHandler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != http.StatusOK {
			t.Errorf("GET %s on the admin handler: %d", path, w.Code)
		}
	}
	srv.SetReady(false)
	w := httptest.NewRecorder()
	srv.AdminHandler().ServeHTTP(w, httptest.NewRequest("GET", c.ReadinessProbe.HTTPGet.Path, nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("readiness while shutting down: %d, want 503", w.Code)
	}
}
