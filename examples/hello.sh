# what: a shell skill: who am I, where am I, what can I see
echo "hello from $(hostname) as $(id -un) (uid $(id -u)), cwd $(pwd)"
echo "root holds: $(ls / | tr '\n' ' ')"
echo "processes visible: $(ls /proc | grep -c '^[0-9]')"
