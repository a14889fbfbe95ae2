package k8s

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Pod is the part of a Pod object (`kubectl get pods -o json`) a run
// watches. It is decoded leniently: the API adds fields.
type Pod struct {
	Metadata struct {
		Name              string            `json:"name"`
		Annotations       map[string]string `json:"annotations"`
		CreationTimestamp string            `json:"creationTimestamp"`
	} `json:"metadata"`
	Status struct {
		Phase      string `json:"phase"`
		Reason     string `json:"reason"`
		Message    string `json:"message"`
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			Name  string `json:"name"`
			Ready bool   `json:"ready"`
			State struct {
				Waiting *struct {
					Reason  string `json:"reason"`
					Message string `json:"message"`
				} `json:"waiting"`
				Terminated *struct {
					ExitCode int    `json:"exitCode"`
					Reason   string `json:"reason"`
					Message  string `json:"message"`
				} `json:"terminated"`
			} `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// DecodePods decodes a `kubectl get pods -o json` list.
func DecodePods(b []byte) ([]Pod, error) {
	var l struct {
		Items []Pod `json:"items"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("decode pod list: %w", err)
	}
	return l.Items, nil
}

// PodState is where a pod is, as a run cares.
type PodState int

const (
	// PodStarting: not yet running; it may still start.
	PodStarting PodState = iota
	PodRunning
	PodSucceeded
	// PodFailed: it failed, or it cannot start without a change by hand
	// (no such image, a bad config): waiting longer would not help.
	PodFailed
)

func (s PodState) String() string {
	switch s {
	case PodStarting:
		return "starting"
	case PodRunning:
		return "running"
	case PodSucceeded:
		return "succeeded"
	case PodFailed:
		return "failed"
	}
	return "PodState(" + strconv.Itoa(int(s)) + ")"
}

// hopeless are container waiting reasons that do not clear by waiting.
var hopeless = []string{
	"ErrImageNeverPull", "InvalidImageName", "ImageInspectError", "ErrImagePull", "ImagePullBackOff",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff",
}

// State says where the pod is and why: the reason a user needs when it
// failed or has not started ("ErrImageNeverPull: ...", "Unschedulable:
// 0/1 nodes are available: 1 Insufficient memory", "OOMKilled, exit code
// 137").
func (p Pod) State() (PodState, string) {
	st := p.Status
	for _, c := range st.ContainerStatuses {
		if t := c.State.Terminated; t != nil && (st.Phase == "Failed" || t.ExitCode != 0) {
			return PodFailed, joinReason(fmt.Sprintf("%s, exit code %d", or(t.Reason, "Error"), t.ExitCode), t.Message)
		}
		if w := c.State.Waiting; w != nil && slices.Contains(hopeless, w.Reason) {
			return PodFailed, joinReason(w.Reason, w.Message)
		}
	}
	switch st.Phase {
	case "Succeeded":
		return PodSucceeded, ""
	case "Failed":
		return PodFailed, joinReason(or(st.Reason, "Failed"), st.Message)
	case "Running":
		return PodRunning, ""
	}
	// Pending: say what it waits for.
	for _, c := range st.Conditions {
		if c.Type == "PodScheduled" && c.Status == "False" {
			return PodStarting, joinReason(or(c.Reason, "not scheduled"), c.Message)
		}
	}
	for _, c := range st.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			return PodStarting, joinReason(w.Reason, w.Message)
		}
	}
	return PodStarting, or(st.Phase, "Pending")
}

// Ready is the pod's Ready condition.
func (p Pod) Ready() bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// CompletionIndex is the pod's index in an Indexed Job (-1: none).
func (p Pod) CompletionIndex() int {
	i, err := strconv.Atoi(p.Metadata.Annotations["batch.kubernetes.io/job-completion-index"])
	if err != nil {
		return -1
	}
	return i
}

func or(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

func joinReason(reason, msg string) string {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return reason
	}
	// Termination messages can be a whole log tail: its first line says it.
	first, _, _ := strings.Cut(msg, "\n")
	return reason + ": " + first
}
