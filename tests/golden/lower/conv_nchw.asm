; fusion/conv_nchw.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_conv_add (class Rows { double: true })
; core function 0: units CubeTiles, tile 1, buffers [b0,b1,b2], workspace []
.kernel mm_fused_conv_add aic
.gm a f32 [] in
.gm b f32 [] in
.gm c f32 [] out
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
.arg s14 0
.arg s15 0
.arg s16 0
.arg s17 0
.arg s18 0
.arg s19 0
.arg s20 0
.arg s21 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r13, 18
    ldarg r14, 19
    ldarg r15, 20
    ldarg r18, 21
    ldarg r19, 22
    ldarg r20, 23
    movi r21, 3
    movi r22, 3
    movi r23, 1
    movi r24, 1
    movi r25, 1
    movi r26, 1
    movi r27, 1
    movi r28, 1
    movi r29, 1
    movi r30, 1
    movi r31, 1
L19:
    bge r0, r1, L98
    div r6, r15, 1
    add r12, r6, 63
    div r12, r12, 64
    max r12, r12, 1
    rem r4, r0, r12
    div r11, r0, r12
    add r12, r13, 63
    div r12, r12, 64
    max r12, r12, 1
    rem r3, r11, r12
    div r11, r11, r12
    rem r17, r11, 1
    div r2, r11, 1
    mul r5, r3, -64
    add r5, r5, r13
    min r5, r5, 64
    mul r4, r4, 64
    sub r6, r6, r4
    min r6, r6, 64
    div r12, r15, 1
    mul r12, r12, r17
    add r4, r4, r12
    mul r9, r2, r18
    mul r9, r9, r19
    mul r9, r9, r20
    mul r11, r2, r13
    mul r11, r11, r15
    mul r12, r4, r13
    add r11, r11, r12
    mul r12, r3, 64
    add r11, r11, r12
    movi r7, 0
    mul r16, r7, 64
    sub r8, r14, r16
    min r8, r8, 64
    mul r12, r3, 64
    ldl1c f32, 64x64, r5, r8, @0x0, a, r9, r12, r16, r17, r18
    mul r10, r4, r14
    add r10, r10, r16
    movi r12, 1
    ldl1x f32, 64x64, r8, r6, @0x4000, b, r10, r12, r14
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 64x64, @0x0, @0x0
    mvl0b f32, 64x64, @0x0, @0x4000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 64x64x64, @0x0, @0x0, @0x0, 0
    barrier
    add r7, r7, 1
L70:
    mul r12, r7, 64
    bge r12, r14, L91
    mul r16, r7, 64
    sub r8, r14, r16
    min r8, r8, 64
    mul r12, r3, 64
    ldl1c f32, 64x64, r5, r8, @0x0, a, r9, r12, r16, r17, r18
    mul r10, r4, r14
    add r10, r10, r16
    movi r12, 1
    ldl1x f32, 64x64, r8, r6, @0x4000, b, r10, r12, r14
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 64x64, @0x0, @0x0
    mvl0b f32, 64x64, @0x0, @0x4000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 64x64x64, @0x0, @0x0, @0x0, 1
    barrier
    add r7, r7, 1
    jmp L70
L91:
    setf m, fixp, 0
    waitf m, fixp, 0
    movi r12, 1
    fixpx f32, 64x64, r5, r6, c, r11, r12, r13, @0x0, 0
    barrier
    add r0, r0, 1
    jmp L19
L98:
    end
; core function 1: units Kernel, tile 1, buffers [b2,b3,b4], workspace []
.kernel k_fused_conv_add aiv
.gm b0_4 f32 [] inout
.gm b1_2 f32 [] inout
.gm b2_3 f32 [] inout
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
.arg s14 0
.arg s15 0
.arg s16 0
.arg s17 0
.arg s18 0
.arg s19 0
.arg s20 0
.arg s21 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L87
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 14
    ldarg r6, 15
    ldarg r7, 16
    mov r3, r0
    ldarg r31, 3
    max r31, r31, 1
    rem r4, r3, r31
    div r3, r3, r31
    ldarg r31, 6
    mul r31, r4, r31
    add r5, r5, r31
    ldarg r31, 9
    mul r31, r4, r31
    add r6, r6, r31
    ldarg r31, 12
    mul r31, r4, r31
    add r7, r7, r31
    ldarg r31, 5
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 11
    mul r31, r3, r31
    add r7, r7, r31
    waitf mte3, mte2, 0
    ld f32, 1x8176, 1, r2, @0x0, b0_4, r5, 0
    ld f32, 1x1, 1, 1, @0x17f60, b1_2, r6, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vbcast f32, 1x8176, 1, r2, @0x7fc0, @0x17f60
    vadd f32, 1x8176, 1, r27, @0xff80, @0x0, @0x7fc0
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x8176, 1, r2, b2_3, r7, 0, @0xff80
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L87
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 14
    ldarg r6, 15
    ldarg r7, 16
    mov r3, r0
    ldarg r31, 3
    max r31, r31, 1
    rem r4, r3, r31
    div r3, r3, r31
    ldarg r31, 6
    mul r31, r4, r31
    add r5, r5, r31
    ldarg r31, 9
    mul r31, r4, r31
    add r6, r6, r31
    ldarg r31, 12
    mul r31, r4, r31
    add r7, r7, r31
    ldarg r31, 5
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 11
    mul r31, r3, r31
    add r7, r7, r31
    waitf mte3, mte2, 1
    ld f32, 1x8176, 1, r2, @0x18000, b0_4, r5, 0
    ld f32, 1x1, 1, 1, @0x2ff60, b1_2, r6, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vbcast f32, 1x8176, 1, r2, @0x1ffc0, @0x2ff60
    vadd f32, 1x8176, 1, r27, @0x27f80, @0x18000, @0x1ffc0
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x8176, 1, r2, b2_3, r7, 0, @0x27f80
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L87:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
