# what: the isolation the default sandbox gives (capabilities, seccomp, read-only root)
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status
if touch /usr/cubicle-probe 2>/dev/null; then echo "/usr is writable (unexpected)"; exit 1; fi
echo "/usr is read-only"
if touch /cubicle-probe 2>/dev/null; then echo "/ is writable (unexpected)"; exit 1; fi
echo "/ is read-only"
echo scratch > /tmp/scratch && echo "/tmp is writable ($(df -h /tmp | awk 'NR==2 {print $2}') cap)"
echo "network interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
