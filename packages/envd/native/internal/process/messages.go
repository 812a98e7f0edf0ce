package process

// A process's events as process.ProcessEvent messages (internal/gen/process).

import pb "aenv/envd/internal/gen/process"

func startEvent(pid int) *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(pid)}}}
}

func keepaliveEvent() *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}
}

func (ev procEvent) message() *pb.ProcessEvent {
	if e := ev.end; e != nil {
		end := &pb.ProcessEvent_EndEvent{ExitCode: e.ExitCode, Exited: e.Exited, Status: e.Status}
		if e.Error != "" {
			s := e.Error
			end.Error = &s
		}
		return &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
	}
	d := &pb.ProcessEvent_DataEvent{}
	switch ev.stream {
	case "stdout":
		d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: ev.data}
	case "stderr":
		d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: ev.data}
	default:
		d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: ev.data}
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}
}

// selectorPid and selectorTag read a ProcessSelector's oneof (nil when unset).
func selectorPid(sel *pb.ProcessSelector) *uint32 {
	if s, ok := sel.GetSelector().(*pb.ProcessSelector_Pid); ok {
		return &s.Pid
	}
	return nil
}

func selectorTag(sel *pb.ProcessSelector) *string {
	if s, ok := sel.GetSelector().(*pb.ProcessSelector_Tag); ok {
		return &s.Tag
	}
	return nil
}
