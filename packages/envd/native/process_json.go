package main

// process.Process messages in proto3 JSON, as protobuf-es reads and writes them: requests are
// read leniently (numbers as strings, enums as names or numbers, base64 in any alphabet),
// answers omit implicit defaults (exitCode 0, exited false, empty args/envs).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// pbUint32 is a proto3-JSON uint32: a number or a decimal string.
type pbUint32 uint32

func (v *pbUint32) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		s = strings.TrimSpace(s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("expected number (uint32), got %s", string(b))
	}
	if f != math.Trunc(f) {
		return fmt.Errorf("expected number (uint32), got %s", string(b))
	}
	if f < 0 || f > math.MaxUint32 {
		return fmt.Errorf("expected number (uint32): %s out of range", s)
	}
	*v = pbUint32(f)
	return nil
}

// pbBytes is a proto3-JSON bytes field: standard or URL-safe base64, padded or not.
type pbBytes []byte

func (v *pbBytes) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("invalid base64 string")
	}
	s = strings.TrimRight(s, "=")
	s = strings.NewReplacer("-", "+", "_", "/").Replace(s)
	d, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("invalid base64 string")
	}
	*v = d
	return nil
}

// signalEnum is process.Signal: a name ("SIGNAL_SIGKILL") or a number. Unknown names read as
// 0, as protobuf-es does with ignoreUnknownFields.
type signalEnum int32

var signalNames = map[string]signalEnum{"SIGNAL_UNSPECIFIED": 0, "SIGNAL_SIGKILL": 9, "SIGNAL_SIGTERM": 15}

func (v *signalEnum) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if n, ok := signalNames[s]; ok {
			*v = n
			return nil
		}
		if n, err := strconv.ParseInt(s, 10, 32); err == nil {
			*v = signalEnum(n)
			return nil
		}
		*v = 0
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return fmt.Errorf("expected enum process.Signal, got %s", s)
	}
	*v = signalEnum(n)
	return nil
}

type envKV struct{ K, V string }

// envMap is a proto map<string,string> that keeps the JSON object's order (protobuf-es keeps
// insertion order: the process's environment and List show the request's order).
type envMap []envKV

func (m *envMap) set(k, v string) {
	for i := range *m {
		if (*m)[i].K == k {
			(*m)[i].V = v
			return
		}
	}
	*m = append(*m, envKV{k, v})
}

func (m *envMap) UnmarshalJSON(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	t, err := d.Token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if t != json.Delim('{') {
		return fmt.Errorf("expected object for map<string, string>")
	}
	var out envMap
	for d.More() {
		kt, err := d.Token()
		if err != nil {
			return err
		}
		k, _ := kt.(string)
		var v *string
		if err := d.Decode(&v); err != nil {
			return fmt.Errorf("map value for %q must be a string", k)
		}
		if v == nil {
			return fmt.Errorf("map value for %q must be a string", k)
		}
		out.set(k, *v)
	}
	*m = out
	return nil
}

func (m envMap) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, e := range m {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(e.K)
		v, _ := json.Marshal(e.V)
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// --- requests ---

type selectorJSON struct {
	Pid *pbUint32 `json:"pid"`
	Tag *string   `json:"tag"`
}

type ptySizeJSON struct {
	Cols pbUint32 `json:"cols"`
	Rows pbUint32 `json:"rows"`
}

type ptyJSON struct {
	Size *ptySizeJSON `json:"size"`
}

type processConfigJSON struct {
	Cmd  string   `json:"cmd"`
	Args []string `json:"args"`
	Envs envMap   `json:"envs"`
	Cwd  *string  `json:"cwd"`
}

type startRequest struct {
	Process *processConfigJSON `json:"process"`
	Pty     *ptyJSON           `json:"pty"`
	Tag     *string            `json:"tag"`
	Stdin   *bool              `json:"stdin"`
}

type selectorRequest struct {
	Process *selectorJSON `json:"process"`
}

type processInputJSON struct {
	Stdin *pbBytes `json:"stdin"`
	Pty   *pbBytes `json:"pty"`
}

type sendInputRequest struct {
	Process *selectorJSON     `json:"process"`
	Input   *processInputJSON `json:"input"`
}

type sendSignalRequest struct {
	Process *selectorJSON `json:"process"`
	Signal  signalEnum    `json:"signal"`
}

type updateRequest struct {
	Process *selectorJSON `json:"process"`
	Pty     *ptyJSON      `json:"pty"`
}

// --- answers ---

type processConfigOut struct {
	Cmd  string   `json:"cmd,omitempty"`
	Args []string `json:"args,omitempty"`
	Envs envMap   `json:"envs,omitempty"`
	Cwd  *string  `json:"cwd,omitempty"`
}

type processInfoOut struct {
	Config processConfigOut `json:"config"`
	Pid    uint32           `json:"pid,omitempty"`
	Tag    *string          `json:"tag,omitempty"`
}

type listResponse struct {
	Processes []processInfoOut `json:"processes,omitempty"`
}

type startEventOut struct {
	Pid uint32 `json:"pid,omitempty"`
}

type dataEventOut struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	Pty    []byte `json:"pty,omitempty"`
}

type endEventOut struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

type processEventOut struct {
	Start     *startEventOut `json:"start,omitempty"`
	Data      *dataEventOut  `json:"data,omitempty"`
	End       *endEventOut   `json:"end,omitempty"`
	Keepalive *struct{}      `json:"keepalive,omitempty"`
}

// eventMessage is StartResponse / ConnectResponse: {"event": ProcessEvent}.
type eventMessage struct {
	Event processEventOut `json:"event"`
}

func startMessage(pid int) eventMessage {
	return eventMessage{processEventOut{Start: &startEventOut{Pid: uint32(pid)}}}
}

func keepaliveMessage() eventMessage {
	return eventMessage{processEventOut{Keepalive: &struct{}{}}}
}

func (ev procEvent) message() eventMessage {
	if ev.end != nil {
		e := ev.end
		out := &endEventOut{ExitCode: e.ExitCode, Exited: e.Exited, Status: e.Status}
		if e.Error != "" {
			s := e.Error
			out.Error = &s
		}
		return eventMessage{processEventOut{End: out}}
	}
	d := &dataEventOut{}
	switch ev.stream {
	case "stdout":
		d.Stdout = ev.data
	case "stderr":
		d.Stderr = ev.data
	default:
		d.Pty = ev.data
	}
	return eventMessage{processEventOut{Data: d}}
}
