# what: a Python skill that tries to reach the network and is refused
import socket

try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    print("opened an AF_INET socket (unexpected)")
    raise SystemExit(1)
except PermissionError as e:
    print(f"AF_INET socket refused: {e}")
unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
print("AF_UNIX socket allowed")
unix.close()
