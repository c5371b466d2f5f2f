; fusion/layernorm.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_reduce_sum_div_sub_mul_reduce_sum_and_5_more (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1,b2,b3], workspace []
.kernel k_fused_reduce_sum_div_sub_mul_reduce_sum_ aiv
.gm b0_0 f32 [] inout
.gm b1_1 f32 [] inout
.gm b2_2 f32 [] inout
.gm b3_3 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
.arg s8 0
.arg s9 0
.arg s10 0
.arg s11 0
.arg s12 0
.arg s13 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L97
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 12
    ldarg r6, 13
    ldarg r7, 14
    ldarg r8, 15
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r7, r7, r31
    ldarg r31, 10
    mul r31, r3, r31
    add r8, r8, r31
    waitf mte3, mte2, 0
    ld f32, 1x4080, 1, r2, @0x0, b0_0, r5, 0
    ld f32, 1x4080, 1, r2, @0x3fc0, b1_1, r6, 0
    ld f32, 1x4080, 1, r2, @0x7f80, b2_2, r7, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vrsum f32, 1x4080, 1, r2, @0x17ee0, @0x0
    vbrow f32, 1x4080, 1, r27, @0xbf40, @0x17ee0
    vdup f32, 1x4080, 1, r27, @0xff00, 64.0
    vdiv f32, 1x4080, 1, r27, @0x13ec0, @0xbf40, @0xff00
    vsub f32, 1x4080, 1, r27, @0xbf40, @0x0, @0x13ec0
    vmul f32, 1x4080, 1, r27, @0x13ec0, @0xbf40, @0xbf40
    vrsum f32, 1x4080, 1, r2, @0x17f00, @0x13ec0
    vbrow f32, 1x4080, 1, r27, @0x13ec0, @0x17f00
    vdiv f32, 1x4080, 1, r27, @0x0, @0x13ec0, @0xff00
    vdup f32, 1x4080, 1, r27, @0x13ec0, 9.999999747378752e-6
    vadd f32, 1x4080, 1, r27, @0xff00, @0x0, @0x13ec0
    vunary f32, 1x4080, 1, r27, @0x13ec0, @0xff00, rsqrt
    vmul f32, 1x4080, 1, r27, @0xff00, @0xbf40, @0x13ec0
    vmul f32, 1x4080, 1, r27, @0x13ec0, @0xff00, @0x3fc0
    vadd f32, 1x4080, 1, r27, @0xff00, @0x13ec0, @0x7f80
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x4080, 1, r2, b3_3, r8, 0, @0xff00
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L97
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 12
    ldarg r6, 13
    ldarg r7, 14
    ldarg r8, 15
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r7, r7, r31
    ldarg r31, 10
    mul r31, r3, r31
    add r8, r8, r31
    waitf mte3, mte2, 1
    ld f32, 1x4080, 1, r2, @0x17fa0, b0_0, r5, 0
    ld f32, 1x4080, 1, r2, @0x1bf60, b1_1, r6, 0
    ld f32, 1x4080, 1, r2, @0x1ff20, b2_2, r7, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vrsum f32, 1x4080, 1, r2, @0x2fe80, @0x17fa0
    vbrow f32, 1x4080, 1, r27, @0x23ee0, @0x2fe80
    vdup f32, 1x4080, 1, r27, @0x27ea0, 64.0
    vdiv f32, 1x4080, 1, r27, @0x2be60, @0x23ee0, @0x27ea0
    vsub f32, 1x4080, 1, r27, @0x23ee0, @0x17fa0, @0x2be60
    vmul f32, 1x4080, 1, r27, @0x2be60, @0x23ee0, @0x23ee0
    vrsum f32, 1x4080, 1, r2, @0x2fea0, @0x2be60
    vbrow f32, 1x4080, 1, r27, @0x2be60, @0x2fea0
    vdiv f32, 1x4080, 1, r27, @0x17fa0, @0x2be60, @0x27ea0
    vdup f32, 1x4080, 1, r27, @0x2be60, 9.999999747378752e-6
    vadd f32, 1x4080, 1, r27, @0x27ea0, @0x17fa0, @0x2be60
    vunary f32, 1x4080, 1, r27, @0x2be60, @0x27ea0, rsqrt
    vmul f32, 1x4080, 1, r27, @0x27ea0, @0x23ee0, @0x2be60
    vmul f32, 1x4080, 1, r27, @0x2be60, @0x27ea0, @0x1bf60
    vadd f32, 1x4080, 1, r27, @0x27ea0, @0x2be60, @0x1ff20
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x4080, 1, r2, b3_3, r8, 0, @0x27ea0
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L97:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
