"""Short loopback connections for a record stream: `python3 benches/shortconn.py SECS`.

Each connection: the server sends 2,000 bytes, the client 50, both close. Used to make the
records `churn -- levels FILE` compresses (benches/RESULTS.md, "Deflate at level 1").
"""
import socket, threading, time
l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen(1024)
port=l.getsockname()[1]
def srv():
    while True:
        c,_=l.accept()
        c.sendall(b'x'*2000); c.recv(100); c.close()
threading.Thread(target=srv,daemon=True).start()
end=time.time()+float(__import__('sys').argv[1])
n=0
while time.time()<end:
    s=socket.socket(); s.connect(('127.0.0.1',port)); s.recv(4096); s.sendall(b'y'*50); s.close(); n+=1
    if n%10==0: time.sleep(0.001)
print(n)
