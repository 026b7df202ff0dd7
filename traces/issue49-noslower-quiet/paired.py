import json,math,statistics as st
def ov(b,i,path,key):
    d=json.load(open(f'./ov-{b}-{i}.json'))
    for a in d['agents']:
        if a['agent']=='placer' and a['path']==path: return a[key]
def cy(b,i,k):
    return json.load(open(f'./cy-{b}-{i}.json'))[k]['median_cpu_ms']
T={5:2.571}
def report(name,f):
    r=[math.log(f('new',i)/f('old',i)) for i in range(1,7)]
    m=st.mean(r); s=st.stdev(r); h=T[5]*s/math.sqrt(6)
    print(f"{name}: new/old {math.exp(m):.3f} ({math.exp(m-h):.3f}..{math.exp(m+h):.3f}), 6 paired runs; per run {[round(math.exp(x),2) for x in r]}")
report('overhead events, own CPU',lambda b,i: ov(b,i,'events','cpu_percent_of_one'))
report('overhead events, in kernel',lambda b,i: ov(b,i,'events','in_kernel_percent_of_one'))
report('overhead proc, own CPU',lambda b,i: ov(b,i,'proc','cpu_percent_of_one'))
report('cycle machine',lambda b,i: cy(b,i,0))
report('cycle generated',lambda b,i: cy(b,i,1))
