; c = relu(a @ b) for 64 x 64 f16 matrices on one AIC core, accumulating in
; f32: GM -> L1 (MTE2), L1 -> L0A/L0B (MTE1), cube multiply-accumulate into
; L0C (M), then the fixpipe writes relu(c) to GM as f32 (FIXP).
.kernel matmul_relu aic
.gm a f16 [64,64] in
.gm b f16 [64,64] in
.gm c f32 [64,64] out
    ldl1 f16, 64x64, 64, 64, @0x0, a, 0, 64
    ldl1 f16, 64x64, 64, 64, @0x2000, b, 0, 64
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f16, 64x64, @0x0, @0x0
    mvl0b f16, 64x64, @0x0, @0x2000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f16, 64x64x64, @0x0, @0x0, @0x0, 0
    setf m, fixp, 0
    waitf m, fixp, 0
    fixp f32, 64x64, 64, 64, c, 0, 64, @0x0, 1
    end
