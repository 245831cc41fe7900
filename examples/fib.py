# what: a Python skill computing something and printing JSON
import json, sys

def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

print(json.dumps({"fib(90)": fib(90), "python": sys.version.split()[0]}))
