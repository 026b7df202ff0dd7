import json, sys
# QoS-normalised performance: each app's achieved/target capped at 1, averaged over apps.
TARGET_BPS = 5e6
def qos(path, share=None):
    r = json.load(open(path))
    out = {}
    for row in r['rows']:
        m = row['mean']; w = m['window_s']; sat = []
        for run in row['runs']:
            s = []
            for p in run['procs']:
                if p['kind'] == 'rx':
                    s.append(min(p['rx_bytes'] / w / TARGET_BPS, 1.0))
                elif p['kind'] == 'cpu':
                    s.append(min(p['work_done_s'] / w / (share * 4), 1.0))
            sat.append(sum(s) / len(s))
        q = sum(sat) / len(sat)
        out[row['policy']] = (m['net_gbps'], m['work_rate'], m['power_w'], m['perf_per_watt'], q, q / m['power_w'])
    return out
for name, path, share in [(a, b, float(c) if c != '-' else None) for a, b, c in (x.split(':') for x in sys.argv[1:])]:
    o = qos(path, share)
    e, q = o['eas'], o['eas+energy-qos']
    IDLE = 3.89  # the sim's odroid node_idle_w (CAL A4)
    dyn = (q[4] / (q[2] - IDLE)) / (e[4] / (e[2] - IDLE))
    print(f"| {name} | {e[0]:.3f} / {q[0]:.3f} | {e[1]:.2f} / {q[1]:.2f} | {e[2]:.2f} / {q[2]:.2f} | {e[3]:.4f} / {q[3]:.4f} ({q[3]/e[3]:.2f}x) | {e[4]*100:.0f}% / {q[4]*100:.0f}% | {q[5]/e[5]:.2f}x | {dyn:.2f}x |")
