# what: a failing skill: its exit status comes back unchanged
# expect-exit: 3
echo "about to fail with status 3" >&2
exit 3
