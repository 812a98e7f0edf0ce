#!/usr/bin/env bash
# Builds the template `desktop`, the default of the @e2b/desktop SDK: the `base` tree plus
# Debian bookworm's Xvfb, a minimal Xfce session (xfce4-session, xfwm4, xfce4-panel,
# xfdesktop), xdotool, scrot, wmctrl, x11vnc, websockify with noVNC at /opt/noVNC (where the
# SDK's stream.start() looks for it), xterm and Firefox ESR. Its start command brings up
# Xvfb :0 and the session, so the warm image holds a running desktop and a create is a
# restore. Packed and imported like `base`. Cached: does nothing when the template holds this
# package set and this script's setup.
# Usage: build-desktop-template.sh TEMPLATES_DIR   (after build-base-template.sh)
set -euo pipefail
dir=${1:?usage: build-desktop-template.sh TEMPLATES_DIR}
here=$(cd "$(dirname "$0")" && pwd)
id=desktop
t="$dir/$id"
# Bump when the package install changes; a change to the setup after it (this script) is
# applied to the installed tree without installing again.
REVISION=2
# xdpyinfo (x11-utils) is the SDK's "X is up" check, xrandr (x11-xserver-utils) its screen
# size, netstat (net-tools) its "noVNC listens" check, gtk-launch (libgtk-3-bin) its launch(),
# xdg-open (xdg-utils) its open().
pkgs="xvfb x11-utils x11-xserver-utils xdotool scrot wmctrl x11vnc websockify xterm"
pkgs="$pkgs xfce4-session xfwm4 xfce4-panel xfdesktop4 xfconf dbus-x11 libgtk-3-bin xdg-utils"
pkgs="$pkgs net-tools firefox-esr fonts-dejavu-core adwaita-icon-theme"
opt=opt/aenv/desktop
pkg_hash=$(printf '%s %s' "$REVISION" "$pkgs" | sha256sum | cut -d' ' -f1)
setup_hash=$(sha256sum "$0" | cut -d' ' -f1)
current=
if [ -f "$t/template.json" ]; then
  current="$t/$(sed -n 's/.*"rootfsDir": *"\([^"]*\)".*/\1/p' "$t/template.json")"
  if [ "$(cat "$current/$opt/packages.hash" 2>/dev/null)" = "$pkg_hash" ] &&
    [ "$(cat "$current/$opt/setup.hash" 2>/dev/null)" = "$setup_hash" ]; then
    echo "desktop template: cached at $t"
    exit 0
  fi
fi
base="$dir/base/$(sed -n 's/.*"rootfsDir": *"\([^"]*\)".*/\1/p' "$dir/base/template.json" 2>/dev/null)"
[ -d "$base/etc" ] || { echo "desktop template: needs the base template in $dir (build-base-template.sh)" >&2; exit 1; }
work=${AENV_BASE_BUILD_DIR:-$dir}
tmp="$work/.desktop.tmp.$$"
cleanup() { # DIR: never into /dev or /proc, should they still be mounted there
  umount "$1/rootfs/proc" "$1/rootfs/dev" 2>/dev/null || true
  rm -rf --one-file-system "$1"
}
for old in "$work"/.desktop.tmp.*; do [ -e "$old" ] && cleanup "$old"; done
mkdir -p "$tmp"
trap 'cleanup "$tmp"' EXIT
r="$tmp/rootfs"
if [ -n "$current" ] && [ "$(cat "$current/$opt/packages.hash" 2>/dev/null)" = "$pkg_hash" ]; then
  echo "desktop template: new setup, packages unchanged"
  cp -a --reflink=auto "$current" "$r"
else
  echo "desktop template: installing Xvfb, Xfce, x11vnc, noVNC and Firefox from Debian — takes several minutes"
  cp -a --reflink=auto "$base" "$r"
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  # apt verifies with gpgv, which needs a real /dev; maintainer scripts want /proc.
  mount --bind /dev "$r/dev"
  mount -t proc proc "$r/proc"
  chroot "$r" apt-get update -q 2>&1 | sed -n 's/^\(E:\|W:\)/desktop template: &/p'
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive chroot "$r" apt-get install -y -q --no-install-recommends $pkgs 2>&1 |
    awk '/^(Unpacking|Setting up) /{n++; if (n%50==0) {print "desktop template: " $0; fflush()}} /^(E:|W:)/{print; fflush()}'
  # noVNC's web client from Debian's package, unpacked where the SDK runs it from
  # (/opt/noVNC/utils/novnc_proxy --web /opt/noVNC): installing the package would pull in Node.
  chroot "$r" sh -c "cd /tmp && apt-get download -q novnc" >/dev/null 2>&1
  dpkg-deb -x "$r"/tmp/novnc_*.deb "$tmp/novnc"
  mv "$tmp/novnc/usr/share/novnc" "$r/opt/noVNC"
  # noVNC's page reads its version from package.json (a git checkout has one, the package not).
  v=$(dpkg-deb -f "$r"/tmp/novnc_*.deb Version | sed 's/^[0-9]*://; s/[-+].*//')
  printf '{"name":"@novnc/novnc","version":"%s"}\n' "$v" > "$r/opt/noVNC/package.json"
  rm -f "$r"/tmp/novnc_*.deb
  for b in Xvfb xdpyinfo xrandr xdotool scrot wmctrl x11vnc websockify xterm startxfce4 xfdesktop \
    firefox-esr gtk-launch xdg-open netstat dbus-launch; do
    chroot "$r" sh -c "command -v $b >/dev/null" || { echo "desktop template: $b missing after install" >&2; exit 1; }
  done
  [ -f "$r/opt/noVNC/vnc.html" ] && [ -x "$r/opt/noVNC/utils/novnc_proxy" ] ||
    { echo "desktop template: noVNC missing" >&2; exit 1; }
  chroot "$r" apt-get clean
  # dbus-launch refuses to start a session bus without a machine id.
  chroot "$r" dbus-uuidgen --ensure=/etc/machine-id
  umount "$r/proc" "$r/dev"
  : > "$r/etc/resolv.conf"
  rm -rf "$r/var/lib/apt/lists/"*
  mkdir -p "$r/$opt"
  echo "$pkg_hash" > "$r/$opt/packages.hash"
fi

# gVisor refuses close_range() with a last descriptor above INT_MAX (EINVAL) where Linux takes
# any; GLib passes ~0U before every spawn and gives up on EINVAL, so no Xfce component, no
# gtk-launch and no xdg-open could start a program. Clamped for every process of the tree.
cat > "$tmp/close-range.c" <<'EOF'
#define _GNU_SOURCE
#include <limits.h>
#include <sys/syscall.h>
#include <unistd.h>
int close_range(unsigned int first, unsigned int last, int flags) {
  return (int)syscall(SYS_close_range, first, last > INT_MAX ? (unsigned int)INT_MAX : last, flags);
}
EOF
gcc -shared -fPIC -O2 -o "$r/usr/local/lib/aenv-close-range.so" "$tmp/close-range.c"
echo /usr/local/lib/aenv-close-range.so > "$r/etc/ld.so.preload"

x=$r/etc/xdg/xfce4/xfconf/xfce-perchannel-xml
mkdir -p "$x"
# A panel with no configuration asks on its first start which one to use; this answers it.
cp "$r/etc/xdg/xfce4/panel/default.xml" "$x/xfce4-panel.xml"
# No GPU under Xvfb: the compositor would only cost CPU on every frame.
if [ -f "$x/xfwm4.xml" ]; then
  sed -i 's|name="use_compositing" type="bool" value="true"|name="use_compositing" type="bool" value="false"|' "$x/xfwm4.xml"
fi
# launch("xterm") and launch("firefox") as the SDK's users write them (gtk-launch takes a
# desktop file's name; Debian's are debian-xterm and firefox-esr). Copies, hidden from menus.
for a in debian-xterm:xterm firefox-esr:firefox; do
  rm -f "$r/usr/share/applications/${a#*:}.desktop"
  sed '/^\[Desktop Entry\]/a NoDisplay=true' "$r/usr/share/applications/${a%%:*}.desktop" \
    > "$r/usr/share/applications/${a#*:}.desktop"
done
# This runsc cannot open /dev/tty at all (EIO, even for a process whose controlling terminal the
# pty is), and xterm's start-up handshake checks its new pty by opening /dev/tty: it took every
# pty for bad, allocated the next one and tried again without end (thousands a second, no
# window). Without the handshake its child opens the pty as its controlling terminal, as it
# does anyway, and runs the shell; a pty that does fail then ends that xterm instead of looping.
# UXTerm's and XTerm-color's defaults include these, so x-terminal-emulator (lxterm) has it too.
# (A tree copied from the previous build has the line already.)
grep -q '^\*ptyHandshake:' "$r/etc/X11/app-defaults/XTerm" ||
  printf '\n! aenv: no start-up handshake (it opens /dev/tty, which gVisor refuses)\n*ptyHandshake: false\n' \
    >> "$r/etc/X11/app-defaults/XTerm"
# launch("x-terminal-emulator"): Debian's name for the default terminal, as a desktop file too.
cat > "$r/usr/share/applications/x-terminal-emulator.desktop" <<'EOF'
[Desktop Entry]
Type=Application
Name=Terminal
Exec=x-terminal-emulator
Terminal=false
NoDisplay=true
EOF
# Firefox: no first-run or update pages, no default-browser question, one content process
# (each costs ~100 MiB in a sandbox sized for one desktop).
mkdir -p "$r/usr/lib/firefox-esr/distribution" "$r/usr/lib/firefox-esr/defaults/pref"
cat > "$r/usr/lib/firefox-esr/distribution/policies.json" <<'EOF'
{"policies":{"DisableAppUpdate":true,"DisableTelemetry":true,"DontCheckDefaultBrowser":true,
 "OverrideFirstRunPage":"","OverridePostUpdatePage":"","NoDefaultBookmarks":true,
 "UserMessaging":{"WhatsNew":false,"ExtensionRecommendations":false,"FeatureRecommendations":false,"SkipOnboarding":true}}}
EOF
cat > "$r/usr/lib/firefox-esr/defaults/pref/aenv.js" <<'EOF'
pref("dom.ipc.processCount", 1);
pref("browser.sessionstore.resume_from_crash", false);
pref("browser.shell.checkDefaultBrowser", false);
pref("datareporting.policy.dataSubmissionEnabled", false);
EOF

# The start command: Xvfb :0 and the Xfce session as the SDK starts them, up before the warm
# image is captured.
cat > "$r/usr/local/bin/aenv-desktop-start" <<'EOF'
#!/bin/sh
# Brings up the desktop on $DISPLAY (default :0) at 1024x768, the SDK's default resolution.
export DISPLAY="${DISPLAY:-:0}"
# The session manager's ICE socket lives here; only root may create it as X wants it.
sudo -n install -d -m 1777 /tmp/.ICE-unix /tmp/.X11-unix 2>/dev/null || true
/usr/bin/Xvfb "$DISPLAY" -ac -screen 0 1024x768x24 -retro -dpi 96 -nolisten tcp -nolisten unix \
  >/tmp/xvfb.log 2>&1 &
i=0
until /usr/bin/xdpyinfo >/dev/null 2>&1; do
  i=$((i + 1)); [ "$i" -lt 200 ] || { echo "Xvfb did not start" >&2; exit 1; }
  sleep 0.05
done
exec startxfce4 >/tmp/xfce4.log 2>&1
EOF
# The SDK starts `Xvfb :0 -screen 0 WxHx24 ...` on every create, and the template's server is
# already on the display (warm images hold it). When its screen has the size asked for there is
# nothing to do. Otherwise (bookworm's Xvfb cannot be resized: RandR refuses RRSetScreenSize)
# it and its session are stopped and the SDK's own server started in their place; the SDK's
# startxfce4 then starts a new session.
cat > "$r/usr/local/bin/Xvfb" <<'EOF'
#!/bin/sh
d=$1
geom=$(printf '%s\n' "$*" | sed -n 's/.*-screen [0-9]* \([0-9]*x[0-9]*\).*/\1/p')
cur=$(DISPLAY=$d xdotool getdisplaygeometry 2>/dev/null | tr ' ' x)
if [ -n "$cur" ]; then
  if [ -z "$geom" ] || [ "$cur" = "$geom" ]; then exit 0; fi
  pkill -f "^/usr/bin/Xvfb $d "
  i=0
  while pgrep -f "^/usr/bin/Xvfb $d " >/dev/null || pgrep -x xfce4-session >/dev/null; do
    i=$((i + 1))
    [ "$i" -lt 100 ] || pkill -9 -x xfce4-session
    sleep 0.05
  done
fi
exec /usr/bin/Xvfb "$@"
EOF
# The SDK's "X is up" check runs right after its Xvfb command has started: it answers once
# that command is done (the server was kept, or the new one is starting), so the SDK never
# mistakes the server being replaced for its own.
cat > "$r/usr/local/bin/xdpyinfo" <<'EOF'
#!/bin/sh
# (Any process naming `Xvfb :N` that is not a server: the SDK's login shell, then the stand-in.)
i=0
while [ "$i" -lt 100 ] && pgrep -af 'Xvfb :' | grep -qv '^[0-9]* /usr/bin/Xvfb '; do
  i=$((i + 1)); sleep 0.05
done
exec /usr/bin/xdpyinfo "$@"
EOF
# The SDK runs `startxfce4` on every create: with the session already up it has nothing to do.
cat > "$r/usr/local/bin/startxfce4" <<'EOF'
#!/bin/sh
pgrep -x xfce4-session >/dev/null && exit 0
# Xvfb blanks the screen after 10 idle minutes; a desktop watched or screenshotted must not.
xset s off -dpms 2>/dev/null
exec /usr/bin/startxfce4 "$@"
EOF
# The SDK's `stream.start()` runs x11vnc in its default single-threaded loop. Under gVisor that
# loop keeps x11vnc at ~85 % of a CPU and it accepts a new client only every 1-6 s, often past
# websockify's patience (noVNC stays blank). With -threads the listener has its own thread:
# a client gets the RFB greeting in ~0.1 s and x11vnc idles at ~7 %.
# But threaded x11vnc hangs for good in its SIGTERM handler when a viewer is connected (three
# threads asleep), so the SDK's stream.stop() (`pkill x11vnc`) left it running and the next
# stream.start() failed with "Stream is already running". So a watcher goes with each x11vnc:
# it is this script too (the same process name, so the same pkill reaches it) and, told to stop,
# kills its x11vnc outright.
cat > "$r/usr/local/bin/x11vnc" <<'EOF'
#!/bin/bash
if [ -n "${AENV_X11VNC_WATCH:-}" ]; then
  pid=$AENV_X11VNC_WATCH
  trap 'kill -KILL "$pid" 2>/dev/null; exit 0' TERM INT HUP
  # A zombie counts as gone: nothing may reap it, and a watcher left behind would read as a
  # running stream.
  while grep -qs '^State:[[:space:]]*[^Z]' "/proc/$pid/status"; do sleep 0.5 & wait $!; done
  exit 0
fi
case " $* " in *" -storepasswd "*) exec /usr/bin/x11vnc "$@" ;; esac
threads=-threads
case " $* " in *" -threads "* | *" -nothreads "*) threads= ;; esac
case " $* " in
*" -bg "*)
  # x11vnc goes to the background itself once it listens; its daemon is the newest x11vnc.
  /usr/bin/x11vnc $threads "$@" || exit
  pid=$(pgrep -n -f '^/usr/bin/x11vnc ') || exit 0
  AENV_X11VNC_WATCH=$pid setsid "$0" </dev/null >/dev/null 2>&1 &
  exit 0
  ;;
esac
/usr/bin/x11vnc $threads "$@" &
pid=$!
trap 'kill -KILL "$pid" 2>/dev/null; exit 143' TERM INT HUP
wait "$pid"
EOF
chmod 0755 "$r/usr/local/bin/aenv-desktop-start" "$r/usr/local/bin/Xvfb" "$r/usr/local/bin/xdpyinfo" \
  "$r/usr/local/bin/startxfce4" "$r/usr/local/bin/x11vnc"
echo "$setup_hash" > "$r/$opt/setup.hash"
# shellcheck source=lib/pack-oci.sh
. "$here/lib/pack-oci.sh"
pack_oci "$r" "$tmp/oci" org.aenv.desktop.revision "$REVISION"
rm -rf "$r"
# Ready once the session's windows are on the screen, not when its processes exist: a warm
# image captured between the two (a loaded host) restored to a black screen.
ready="DISPLAY=:0 /usr/bin/xdpyinfo >/dev/null 2>&1 && pgrep -x xfce4-session >/dev/null"
ready="$ready && w=\$(DISPLAY=:0 wmctrl -l 2>/dev/null) && echo \"\$w\" | grep -q ' Desktop\$'"
ready="$ready && echo \"\$w\" | grep -q ' xfce4-panel\$'"
node "$here/../packages/server/bin/aenv-server.js" import-template --templates-dir "$dir" \
  --id "$id" --name "$id" --memory-mb 2048 --cpu-count 2 \
  --start-cmd "DISPLAY=:0 /usr/local/bin/aenv-desktop-start" \
  --ready-cmd "$ready" \
  "oci:$tmp/oci:latest"
cleanup "$tmp"; trap - EXIT
echo "desktop template: ready at $t ($(du -sh "$t" | cut -f1))"
